"""Issue 48, item 1: the key states the claims that count, in the mission's closed vocabulary,
and `mission check` refuses a key whose claims do not check before it starts anything; a stated
claim matches a key claim on kind, direction, service and (where both name one) target; prose
never decides, it is only flagged where it reads the other way."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from harness.errors import UserError
from harness.mission import load_mission_dir
from harness.mission_services import check_key_claims
from harness.telemetry import claims as cm

MISSION = Path(__file__).resolve().parents[1] / "missions" / "observability"
VOCAB = cm.load_vocabulary(MISSION)


def test_the_mission_key_states_claims_for_every_defect():
    assert cm.check_key(MISSION / "key" / "defects.yaml", VOCAB) == []
    defects = yaml.safe_load((MISSION / "key" / "defects.yaml").read_text())["defects"]
    assert all(d.get("claims") for d in defects)
    check_key_claims(load_mission_dir(MISSION))  # the real mission passes


@pytest.mark.parametrize(("edit", "named"), [
    (lambda d: d.pop("claims"), "defect T01-orders-bypass-db-span: claims: state at least one claim"),
    (lambda d: d.update(claims=[{"kind": "slowness", "direction": "absent", "scope": "shop-api"}]),
     "claims[0].kind: 'slowness' is not one of missing-signal"),
    (lambda d: d.update(claims=[{"kind": "latency", "direction": "sideways", "scope": "shop-api"}]),
     "claims[0].direction: give one or a list of higher"),
    (lambda d: d.update(claims=[{"kind": "latency", "direction": "higher", "scope": "shop-web"}]),
     "claims[0].scope: give one or a list of shop-api"),
    (lambda d: d.update(claims=[{"kind": "latency", "direction": "higher", "scope": "shop-api", "why": "x"}]),
     "claims[0]: unknown field why"),
])
def test_mission_check_refuses_a_key_whose_claims_do_not_check(tmp_path: Path, edit, named):
    mission = tmp_path / "observability"
    shutil.copytree(MISSION, mission, ignore=shutil.ignore_patterns("__pycache__", "*.duckdb"))
    key = mission / "key" / "defects.yaml"
    data = yaml.safe_load(key.read_text())
    edit(data["defects"][0])
    key.write_text(yaml.safe_dump(data))
    with pytest.raises(UserError) as exc:
        check_key_claims(load_mission_dir(mission))
    assert named in str(exc.value) and exc.value.field == "claims"


def test_a_broken_vocabulary_is_named(tmp_path: Path):
    mission = tmp_path / "observability"
    shutil.copytree(MISSION, mission, ignore=shutil.ignore_patterns("__pycache__", "*.duckdb"))
    (mission / "claims.yaml").write_text("kinds: {latency: {category: Speed}}\ndirections: [higher]\nservices: [a]\n")
    with pytest.raises(UserError, match="kinds.latency.category: give Telemetry, Perf or Behavior"):
        check_key_claims(load_mission_dir(mission))


def _stated(kind, direction, scope):
    return cm.record_claim(kind, direction, scope, VOCAB)


@pytest.mark.parametrize(("stated", "matches"), [
    (("missing-signal", "absent", "shop-api"), True),
    (("missing-signal", "lower", "shop-api:POST /orders"), True),
    (("missing-signal", "lower", "shop-api:  'post   /orders' "), True),  # spacing, quotes and case
    (("missing-signal", "present", "shop-api"), False),
    (("missing-signal", "absent", "shop-mcp"), False),
    (("missing-signal", "absent", "shop-api:GET /stats"), False),
    (("wrong-signal", "absent", "shop-api"), False),
])
def test_a_stated_claim_matches_on_every_field(stated, matches):
    t01 = cm.key_claims([{"kind": "missing-signal", "direction": ["absent", "lower"], "scope": "shop-api",
                          "targets": ["POST /orders", "db.system.name"]}], VOCAB, "T01")
    assert (cm.matches(_stated(*stated), t01) is not None) is matches


@pytest.mark.parametrize(("fields", "field"), [
    (("Telemetry", "absent", "shop-api"), "kind: 'Telemetry' (that is a category"),
    (("missing-signal", None, "shop-api"), "direction: missing"),
    (("missing-signal", "absent", ["shop-api"]), "scope: missing"),
    (("missing-signal", "absent", "shop-api:a|b"), "scope: the target"),
])
def test_each_closed_field_is_checked_alone(fields, field):
    problems = cm.record_claim_problems(*fields, VOCAB)
    assert len(problems) == 1 and problems[0].startswith(field.split(":")[0]) and field in problems[0]
    assert _stated(*fields) is None


@pytest.mark.parametrize(("text", "direction", "flagged"), [
    ("output tokens are far higher in the metric", "lower", True),
    ("the token metric under-reports output", "higher", True),
    ("output tokens are not higher than the spans: no more than them", "higher", False),  # negations: unread
    ("larger payloads; duplicated detail calls", "lower", True),
    ("fewer searches; larger payloads", "lower", False),  # both ways: unread
    ("POST /orders spans lack their db child", "absent", False),
])
def test_prose_is_only_flagged_never_decisive(text, direction, flagged):
    assert (cm.contradiction(text, direction) is not None) is flagged


def test_a_markdown_row_states_a_claim_only_in_the_closed_form():
    assert cm.stated_in_text("x [claim: over-fetch, higher, shop-api:GET /stats] y", VOCAB) == \
        ("over-fetch", "higher", "shop-api:GET /stats")
    for text in ("reads the whole table, higher", "[claim: over-fetch, upward, shop-api]",
                 "[claim: overfetch, higher, shop-api]", "claim: over-fetch, higher, shop-api"):
        assert cm.stated_in_text(text, VOCAB) is None
