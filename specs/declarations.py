"""The built-in kinds' spec declarations: each one's model, its observation-free rules and the
resources it references (``specs.kinds.SpecKind``), named by the table of kinds
(``specs.kinds.KINDS``). A kind added later declares its own in its folder."""

from __future__ import annotations

from specs.crossref import deployment_set_rules, experiment_set_rules
from specs.experiment import Experiment, check_experiment, derive_qualification
from specs.images import check_host
from specs.kinds import Reference, SpecKind
from specs.models import Deployment, Host, StreamSet
from specs.rules import check_deployment
from specs.streamrules import check_streamset

HOST = SpecKind("Host", Host, check_host)
DEPLOYMENT = SpecKind("Deployment", Deployment, check_deployment, (
    Reference(("spec", "host"), "Host", lambda d: d.spec.host),),
    set_rules=deployment_set_rules,
    # Neither changes the container: the token is only what we send to the service.
    # ... nor does the promotion: how a change is let in, not what runs.
    hash_excludes=frozenset({"readiness", "apiTokenSecret", "promotion"}),
    derives=derive_qualification, derived_from=("spec", "promotion"))
STREAMSET = SpecKind("StreamSet", StreamSet, check_streamset, (
    Reference(("spec", "deployment"), "Deployment", lambda s: s.spec.deployment,
              ready_first=True),
    Reference(("spec", "publisher", "host"), "Host", lambda s: s.spec.publisher.host)))
EXPERIMENT = SpecKind("Experiment", Experiment, check_experiment, (
    Reference(("spec", "template"), "Deployment", lambda e: e.spec.template, checked=False),),
    set_rules=experiment_set_rules)
