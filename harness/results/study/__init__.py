"""A study's stored records: ``study.json`` (``record``) and a study's ``policy.json``
(``policy_file``): the store layer."""
