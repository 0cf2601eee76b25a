"""The canary: live streams captioned at once, isolation and performance judged."""
