"""Published RTSP sources: the app that runs inside a publisher container (``app``), the image
it runs in (``image``) and the container request for one source (``run``).

Kept free of imports: ``app`` runs inside the image with nothing but the stdlib and ``gi``, so
importing this package must not pull in docker-py.
"""
