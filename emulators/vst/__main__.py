"""Entry point: ``/usr/bin/python3 -m emulators.vst`` serves until SIGTERM/SIGINT."""

from emulators.vst.server import main

if __name__ == "__main__":
    raise SystemExit(main())
