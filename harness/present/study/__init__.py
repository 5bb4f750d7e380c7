"""What a study shows (present layer): the terminal tables and ``analysis.md`` (``tables``,
``analysis_md``) and the HTML page (``report``)."""
