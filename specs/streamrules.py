"""StreamSet rules that need no observation (the StreamSet counterpart of ``specs.rules``).

Why these: each source must be exactly one thing (a URL, a colour, or a pinned file), every
source needs a distinct name because its RTVI stream ID derives from it, and a synthetic colour
must be one a caption can name -- otherwise "the caption names its own colour" is untestable.
"""

from __future__ import annotations

from collections.abc import Iterator

from specs.models import SourceSpec, StreamSet, StreamSetSpec
from specs.rules import URL_USERINFO_RE, Finding

R_SOURCE = "StreamSet rule: each source is exactly one of url, synthetic, file"
R_SOURCE_NAME = "StreamSet rule: source names are unique"
R_COLOUR = "StreamSet rule: synthetic colours are palette names or #RRGGBB"
R_IDENTITY = "StreamSet rule: one source identity per stream"
R_TEARDOWN = "StreamSet rule: drain timeout fits the teardown deadline"
R_CREDENTIALS = "Deployment rule 12: secrets are references"
R_CHUNKS = "StreamSet rule: captions come chunk by chunk"
# Colour names a caption can carry back (the emulator and the frame probe use the same RGB).
PALETTE_NAMES = frozenset({"BLACK", "WHITE", "RED", "GREEN", "BLUE", "YELLOW", "CYAN", "MAGENTA",
                           "ORANGE", "PURPLE", "GRAY"})


def check_streamset(resource: StreamSet) -> list[Finding]:
    """Every observation-free StreamSet rule; paths are relative to the document root."""
    spec = resource.spec
    found = [Finding(("spec", *f.path), f.message, f.rule, f.severity)
             for f in (*_sources(spec), *_vst(spec), *_teardown(spec), *_chunks(spec))]
    return found


def _sources(spec: StreamSetSpec) -> Iterator[Finding]:
    names: set[str] = set()
    urls: dict[str, str] = {}
    for i, source in enumerate(spec.sources):
        forms = [f for f in ("url", "synthetic", "file") if getattr(source, f) is not None]
        if len(forms) != 1:
            given = ", ".join(forms) or "none"
            yield Finding(("sources", i), f"source {source.name!r} must give exactly one of url, "
                          f"synthetic, file (given: {given})", R_SOURCE)
        if source.name in names:
            yield Finding(("sources", i, "name"), f"source {source.name!r} is listed twice",
                          R_SOURCE_NAME)
        names.add(source.name)
        yield from _colours(i, source)
        if source.url is not None and URL_USERINFO_RE.search(source.url):
            yield Finding(("sources", i, "url"), f"source {source.name!r} carries credentials "
                          "in its URL; a spec must not hold secret values", R_CREDENTIALS)
        if source.url is not None:
            other = urls.setdefault(source.url, source.name)
            if other != source.name:
                yield Finding(("sources", i, "url"), f"source {source.name!r} uses the same URL "
                              f"as {other!r}: two streams of one camera measure subscribers, not "
                              "independent streams", R_IDENTITY, "warning")


def _colours(i: int, source: SourceSpec) -> Iterator[Finding]:
    synthetic = source.synthetic
    if synthetic is None:
        return
    for field, value in (("colour", synthetic.colour), ("border", synthetic.border)):
        if value is not None and not value.startswith("#") and value.upper() not in PALETTE_NAMES:
            yield Finding(("sources", i, "synthetic", field), f"unknown colour {value!r}; use "
                          f"#RRGGBB or one of {', '.join(sorted(PALETTE_NAMES))}", R_COLOUR)
    if synthetic.border is not None and synthetic.border.upper() == synthetic.colour.upper():
        yield Finding(("sources", i, "synthetic", "border"), "a border must contrast with the "
                      "colour it surrounds", R_COLOUR)


def _vst(spec: StreamSetSpec) -> Iterator[Finding]:
    if spec.vst is not None and URL_USERINFO_RE.search(spec.vst.url):
        yield Finding(("vst", "url"), "the VST URL carries credentials; a spec must not hold "
                      "secret values", R_CREDENTIALS)


def _teardown(spec: StreamSetSpec) -> Iterator[Finding]:
    if spec.teardown.drainTimeoutSeconds > spec.teardown.deadlineSeconds:
        yield Finding(("teardown", "drainTimeoutSeconds"), "the drain timeout is longer than the "
                      f"teardown deadline ({spec.teardown.deadlineSeconds}s)", R_TEARDOWN)


def _chunks(spec: StreamSetSpec) -> Iterator[Finding]:
    """A caption arrives once per chunk: an overlap of a whole chunk never moves on, and a
    caption may not be required younger than one chunk (it would always be stale)."""
    captions = spec.captions
    if captions is None:
        return
    if captions.chunkOverlapDuration >= captions.chunkDuration:
        yield Finding(("captions", "chunkOverlapDuration"), f"an overlap of "
                      f"{captions.chunkOverlapDuration}s is not shorter than the "
                      f"{captions.chunkDuration}s chunk: chunks would never move on", R_CHUNKS)
    if captions.maxCaptionAgeSeconds < captions.chunkDuration:
        default = ("" if "maxCaptionAgeSeconds" in captions.model_fields_set
                   else " (the default): raise it with the chunk")
        yield Finding(("captions", "maxCaptionAgeSeconds"), f"{captions.maxCaptionAgeSeconds:g}s"
                      f"{default} is less than one {captions.chunkDuration}s chunk, and a "
                      "caption comes once per chunk: every caption would read as stale",
                      R_CHUNKS)
