"""Entry point: ``python3 -m emulators.rtvi`` runs the emulator until SIGTERM/SIGINT or a fault."""

from emulators.rtvi.server import main

if __name__ == "__main__":
    raise SystemExit(main())
