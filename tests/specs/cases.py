"""Bad spec inputs shared by the pure spec tests and the CLI "changes nothing" tests.

Each case is a YAML text whose offending line ends with ``# <-``; the error must name that
line and the rule.
"""

from __future__ import annotations

from dataclasses import dataclass

DIGEST = "sha256:" + "ab" * 32

HEADER = """\
apiVersion: rtvi.reconciler/v1
kind: Host
metadata:
  name: local
---
apiVersion: rtvi.reconciler/v1
kind: Deployment
metadata:
  name: vlm
spec:
  host: local
"""


@dataclass(frozen=True)
class Case:
    id: str
    body: str
    rule: str
    field: str

    @property
    def text(self) -> str:
        return HEADER + self.body

    @property
    def line(self) -> int:
        for number, line in enumerate(self.text.splitlines(), start=1):
            if line.rstrip().endswith("# <-"):
                return number
        raise AssertionError(f"case {self.id} has no marker")


def body(image: str = f"rtvi-emulator@{DIGEST}", model: str = "    path: "
         "ngc:nim/nvidia/m:1\n    use: vllm-compatible\n", extra: str = "") -> str:
    return f"  image: {image}\n  model:\n{model}  port: {{host: 18000}}\n{extra}"


CASES = [
    Case("malformed-yaml", body(extra="  env: {A: [1, 2}  # <-\n"), "yaml-syntax", "-"),
    Case("unknown-field", body(extra="  replicas: 3  # <-\n"), "schema", "spec.replicas"),
    Case("wrong-type", body(extra="  readiness:\n    timeoutSeconds: soon  # <-\n"), "schema",
         "spec.readiness.timeoutSeconds"),
    Case("bad-digest", body(image="rtvi-emulator@sha256:abc123  # <-"), "rule 1",
         "spec.image"),
    Case("git-outside-exploration", body(model="    use: vllm-compatible\n    path: "
         "git:https://huggingface.co/org/model  # <-\n"), "rule 2", "spec.model.path"),
    Case("evs-without-pruning-rate", body(extra="  env:\n    VIA_EVS_SESSION: true  # <-\n"
         "    VLLM_IGNORE_EOS: true\n"), "rule 8", "spec.env.VIA_EVS_SESSION"),
    Case("eager-without-reasons", body(extra="  env:\n    VLLM_ENFORCE_EAGER: true  # <-\n"),
         "rule 6", "spec.env.VLLM_ENFORCE_EAGER"),
    Case("trust-remote-code-without-allowlist", body(extra="  env:\n"
         "    VLM_TRUST_REMOTE_CODE: true  # <-\n"), "rule 5", "spec.env.VLM_TRUST_REMOTE_CODE"),
]


def streamset(sources: str, deployment: str = "vlm") -> str:
    """A valid Deployment followed by a StreamSet with ``sources`` (YAML list items)."""
    return body() + ("---\napiVersion: rtvi.reconciler/v1\nkind: StreamSet\nmetadata:\n"
                     f"  name: cams\nspec:\n  deployment: {deployment}\n  sources:\n{sources}")


CASES += [
    Case("secret-hides-ruled-variable", body(extra="  secrets:\n  - name: MODEL_PATH  # <-\n"
         "    fromEnv: SOME_ENV\n"), "rule 12", "spec.secrets.0.name"),
    Case("streamset-source-two-forms", streamset("  - name: a  # <-\n    url: rtsp://127.0.0.1/a\n"
         "    synthetic: {colour: RED}\n"), "exactly one of url, synthetic, file",
         "spec.sources.0"),
    Case("streamset-unknown-colour", streamset("  - name: a\n    synthetic:\n"
         "      colour: TEAL  # <-\n"), "palette names", "spec.sources.0.synthetic.colour"),
    Case("streamset-bad-url", streamset("  - name: a\n    url: http://127.0.0.1/a  # <-\n"),
         "schema", "spec.sources.0.url"),
    Case("streamset-unknown-deployment", streamset("  - name: a\n    url: rtsp://127.0.0.1/a\n",
         deployment="nope  # <-"), "references name an existing resource", "spec.deployment"),
    Case("streamset-credentials-in-url", streamset("  - name: a\n"
         "    url: rtsp://admin:canary-pw@127.0.0.1/a  # <-\n"), "secrets are references",
         "spec.sources.0.url"),
    Case("streamset-file-without-digest", streamset("  - name: a\n    file:  # <-\n"
         "      path: /media/a.mp4\n"), "schema", "spec.sources.0.file.sha256"),
]

CASES += [
    Case("env-value-nul", body(extra='  env:\n    X: "a\\0b"  # <-\n'),
         "strings carry no control or bidi characters", "spec.env.X"),
    Case("env-value-escape", body(extra='  env:\n    Y: ok\n    X: "a\\eb"  # <-\n'),
         "strings carry no control or bidi characters", "spec.env.X"),
    Case("model-path-nul", body(model='    use: vllm-compatible\n'
         '    path: "ngc:nim/nvidia/m:1\\0"  # <-\n'),
         "strings carry no control or bidi characters", "spec.model.path"),
    # A zero-width space makes a second path that looks like the first.
    Case("model-path-zero-width", body(model='    use: vllm-compatible\n'
         '    path: "ngc:nim/nvidia/m\\u200b:1"  # <-\n'),
         "strings carry no control or bidi characters", "spec.model.path"),
]

CASES += [
    Case("api-token-names-no-secret", body(extra="  apiTokenSecret: RTVI_TOKEN  # <-\n"),
         "rule 12", "spec.apiTokenSecret"),
]


def with_captions(captions: str) -> str:
    """A StreamSet with one URL source and a ``captions`` block (YAML, indented two spaces)."""
    return streamset("  - name: a\n    url: rtsp://127.0.0.1/a\n") + "  captions:\n" + captions


CASES += [  # RTVI's own bounds (VlmQuery in the OpenAPI): refused here, not by the service
    Case("captions-seed-zero", with_captions("    prompt: p\n    seed: 0  # <-\n"), "schema",
         "spec.captions.seed"),
    Case("captions-seed-too-big", with_captions("    prompt: p\n    seed: 4294967296  # <-\n"),
         "schema", "spec.captions.seed"),
    Case("captions-prompt-too-long", with_captions(f"    prompt: {'x' * 10241}  # <-\n"),
         "schema", "spec.captions.prompt"),
]

GPU_CASE = Case("gpu-host-lacks", body(extra="  gpus:\n  - 7  # <-\n"), "rule 10",
                "spec.gpus.0")
