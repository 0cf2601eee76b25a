"""The experiment runner: a run as a job on its Host, beside the service it measures (issue 27).

The image (``image``) carries the run code and what it imports; the job itself follows.
"""
