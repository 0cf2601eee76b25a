"""Performance-gated promotion (issue 39): how a candidate service is judged against the one
it would replace, gate by gate (``gates``), latency beyond noise (``judge``)."""
