"""Clients every kind shares: Docker (``docker_client``), RTVI, VST, the HTTP plumbing they
stand on, and SSH tunnels to remote engines."""
