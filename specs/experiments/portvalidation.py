"""``type: portValidation``: the BYOM port's report (``rules.md``, portValidation): the model
contract, the integration path, a smoke per modality and the accuracy gate."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Literal

from pydantic import Field

from specs.experiments.base import ExperimentSpecBase
from specs.models import SHA256_PATTERN, AbsolutePath, Strict
from specs.rules import Finding
from specs.values import free_text

R_PORT = "Experiment rule: port validation"
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

    path: AbsolutePath
    sha256: str = Field(pattern=SHA256_PATTERN)
    mediaType: Literal["image", "video"]
    facts: list[str] = Field(min_length=1, max_length=16)
    absent: list[str] = Field(default_factory=list, max_length=16)


class TextCheck(Strict):
    """One labelled text item of the accuracy set: a prompt and what its answer must name
    (and must not)."""

    prompt: str = free_text(min_length=1, max_length=10000)
    facts: list[str] = Field(min_length=1, max_length=16)
    absent: list[str] = Field(default_factory=list, max_length=16)


class VideoSampling(Strict):
    """The declared sampling of video requests (sent with every video smoke request)."""

    framesPerChunk: float = Field(default=8, gt=0, le=512)
    useFps: bool = False


class PortValidationSpec(Strict):
    """``type: portValidation``: the BYOM report (``rules.md``, portValidation)."""

    integration: IntegrationPath
    model: ModelContract
    modalities: list[Modality] = Field(min_length=1, max_length=3)
    media: list[PortMedia] = Field(default_factory=list, max_length=64)
    textChecks: list[TextCheck] = Field(default_factory=list, max_length=64)
    videoSampling: VideoSampling = Field(default_factory=VideoSampling)
    minAccuracy: float = Field(default=1.0, gt=0, le=1)
    maxTokens: int = Field(default=64, ge=1, le=16384)
    requestTimeoutSeconds: float = Field(default=120, gt=0, le=3600)
    platforms: list[str] = Field(default_factory=list, max_length=16)  # where it was validated


class PortValidationExperimentSpec(ExperimentSpecBase):
    type: Literal["portValidation"]
    portValidation: PortValidationSpec

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
        for i, media in enumerate(port.media):
            clash = {f.lower() for f in media.facts} & {a.lower() for a in media.absent}
            if clash:
                yield Finding(("portValidation", "media", i, "absent"),
                              f"{', '.join(sorted(clash))} is both shown and absent", R_PORT)

