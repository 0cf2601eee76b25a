"""``type: portValidation``: the BYOM port's report (``rules.md``, portValidation): the model
contract, the integration path, a smoke per modality and the accuracy gate."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Annotated, Literal

from pydantic import Field

from specs.experiments.base import ExperimentSpecBase
from specs.models import SHA256_PATTERN, AbsolutePath, Strict
from specs.rules import Finding
from specs.trust import reads
from specs.values import free_text

R_PORT = "Experiment rule: port validation"
WORD = re.compile(r"[^\W\d_]+", re.UNICODE)
"""A word as the grounding gate reads answers and facts: letters only (digits, punctuation
and underscores separate words)."""


def words(text: str) -> list[str]:
    """The words of ``text``, lowercased, as the grounding gate compares them."""
    return [w.lower() for w in WORD.findall(text)]

CONTROL_ABSENT = ["elephant", "bus", "aircraft"]
"""What the control question asks is absent from the first media item (and from every
validation input): an answer naming one invents it."""
Phrase = Annotated[str, Field(min_length=1, max_length=200)]
"""A fact or absent phrase: a few words, as an answer names them."""
IMMUTABLE_REVISION = r"^([0-9a-f]{40}|sha256:[0-9a-f]{64})$"  # a commit or a content digest
Modality = Literal["text", "image", "video"]


class ModelContract(Strict):
    """The model contract, recorded before any code changes (BYOM porting): what the port is
    of, pinned, so the report names exactly what was validated."""

    source: str = Field(min_length=1, max_length=500)  # hf:org/name, ngc:..., a mounted path
    revision: str = Field(pattern=IMMUTABLE_REVISION)  # a branch or tag moves: refused
    processor: str = Field(min_length=1, max_length=200)
    tokenizer: str = Field(min_length=1, max_length=200)
    quantization: str = Field(min_length=1, max_length=100)
    contextLength: int = Field(ge=1, le=10_000_000)
    frameSampling: str = Field(min_length=1, max_length=500)
    kernels: list[str] = Field(default_factory=list, max_length=32)  # custom kernels; []: none


class IntegrationPath(Strict):
    """The first integration path that worked; a patch says why the other three cannot."""

    path: Literal["configuration", "adapter", "plugin", "patch"]
    reason: str | None = free_text(default=None, min_length=1, max_length=2000)


class PortMedia(Strict):
    """One labelled, checksum-pinned image or clip: the smoke input of its modality and one
    item of the accuracy set. ``facts``: what a correct answer names; ``absent``: what the
    input does not show (an answer naming it invents it)."""

    path: AbsolutePath = reads("media")
    sha256: str = Field(pattern=SHA256_PATTERN)
    mediaType: Literal["image", "video"]
    facts: list[Phrase] = Field(min_length=1, max_length=16)
    absent: list[Phrase] = Field(default_factory=list, max_length=16)


class TextCheck(Strict):
    """One labelled text item of the accuracy set: a prompt and what its answer must name
    (and must not)."""

    prompt: str = free_text(min_length=1, max_length=10000)
    facts: list[Phrase] = Field(min_length=1, max_length=16)
    absent: list[Phrase] = Field(default_factory=list, max_length=16)


class VideoSampling(Strict):
    """The declared sampling of video requests (sent with every video smoke request)."""

    framesPerChunk: int = Field(default=8, ge=1, le=512)  # frames are counted whole
    useFps: bool = False


class PortValidationSpec(Strict):
    """``type: portValidation``: the BYOM report (``rules.md``, portValidation)."""

    integration: IntegrationPath
    model: ModelContract
    modalities: list[Modality] = Field(min_length=1, max_length=3)
    media: list[PortMedia] = Field(default_factory=list, max_length=64)
    textChecks: list[TextCheck] = Field(default_factory=list, max_length=64)
    videoSampling: VideoSampling = Field(default_factory=VideoSampling)
    minAccuracy: float = Field(default=1.0, ge=0.01, le=1)
    maxTokens: int = Field(default=64, ge=1, le=16384)
    requestTimeoutSeconds: float = Field(default=120, ge=1, le=3600)
    platforms: list[str] = Field(default_factory=list, max_length=16)  # where it was validated


class PortValidationExperimentSpec(ExperimentSpecBase):
    type: Literal["portValidation"]
    portValidation: PortValidationSpec

    def single_waits(self) -> list[tuple[float, tuple[str, ...], str]]:
        port = self.portValidation
        if "requestTimeoutSeconds" not in port.model_fields_set:
            return []
        return [(port.requestTimeoutSeconds, ("portValidation", "requestTimeoutSeconds"),
                 "one request's timeout")]

    def type_findings(self) -> Iterator[Finding]:
        port = self.portValidation
        if port.integration.path == "patch" and not port.integration.reason:
            yield Finding(("portValidation", "integration", "reason"), "a patch needs the reason "
                          "configuration, an adapter and a plugin cannot work", R_PORT)
        if len(set(port.modalities)) != len(port.modalities):
            yield Finding(("portValidation", "modalities"), "a modality is listed twice", R_PORT)
        for modality in ("image", "video"):
            has = [m for m in port.media if m.mediaType == modality]
            if modality in port.modalities and not has:
                yield Finding(("portValidation", "media"), f"{modality} is claimed: give at least "
                              f"one labelled {modality} (mediaType: {modality}) to smoke it with",
                              R_PORT)
            if has and modality not in port.modalities:
                yield Finding(("portValidation", "modalities"), f"{modality} media are given but "
                              f"{modality} is not claimed: claim it, or remove them", R_PORT)
        if not port.media and not port.textChecks:
            yield Finding(("portValidation", "media"), "the accuracy gate needs a labelled set: "
                          "media (images, clips) or textChecks", R_PORT)
        yield from _never_pass(port)
        yield from _wordless(port)


def _labelled(port: PortValidationSpec
              ) -> list[tuple[tuple[str | int, ...], PortMedia | TextCheck]]:
    """Every labelled item of the accuracy set with where it stands in the spec."""
    return [*((("portValidation", "media", i), m) for i, m in enumerate(port.media)),
            *((("portValidation", "textChecks", i), c) for i, c in enumerate(port.textChecks))]


def _never_pass(port: PortValidationSpec) -> Iterator[Finding]:
    """An absent phrase whose words lie inside a fact's, as the gate reads them (``red car``
    shown, ``car`` absent; ``red`` and ``Red!``): an answer that names the fact names the
    absent phrase too, so the row could never pass."""
    for where, row in _labelled(port):
        facts = [(fact, f" {' '.join(words(fact))} ") for fact in row.facts]
        for j, phrase in enumerate(row.absent):
            wanted = f" {' '.join(words(phrase))} "
            inside = [fact for fact, said in facts if wanted.strip() and wanted in said]
            if inside:
                yield Finding((*where, "absent", j), f"{phrase!r} is inside the fact "
                              f"{inside[0]!r} as the gate reads words: an answer naming the "
                              "fact names it too, so this item could never pass", R_PORT)
    if port.media:  # the control question asks the first item for what no input shows
        for j, (fact, said) in enumerate((f, f" {' '.join(words(f))} ")
                                         for f in port.media[0].facts):
            named = [word for word in CONTROL_ABSENT if f" {word} " in said]
            if named:
                yield Finding(("portValidation", "media", 0, "facts", j), f"{fact!r} names "
                              f"{named[0]!r}, which the control question asks the first item "
                              f"for as absent ({', '.join(CONTROL_ABSENT)}): the control could "
                              "never pass; put another item first", R_PORT)


def _wordless(port: PortValidationSpec) -> Iterator[Finding]:
    """A fact or absent phrase with no word the gate can read (``3``, ``!!``) can never match:
    a fact would fail every answer, an absent phrase would check nothing."""
    for where, row in _labelled(port):
        for field in ("facts", "absent"):
            for j, phrase in enumerate(getattr(row, field)):
                if not words(phrase):
                    yield Finding((*where, field, j), "has no word the grounding gate can "
                                  "match (it reads words of letters; digits and punctuation "
                                  "are not read): write it in words", R_PORT)

