"""A study's analysis (derive layer): its points read and summarised (``collect``), the observations,
break-even, best K and the recommendation (``analysis``), the speculation policy its decided cells
support (``policy``)."""
