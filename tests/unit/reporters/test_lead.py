"""A check that leads its section (CheckResult.lead) gets its sentences first and its declared chart
beside them, in every report that has sections, without any reporter naming the check."""

from __future__ import annotations

from preflight.core.check import measure
from preflight.core.model import FIGURE_SCALING, CheckResult, Scope, Status
from preflight.reporters import figures, html, markdown
from tests.conftest import make_report, make_result

LEAD = ["Global batch 1,024, as tuned: the learning rate stays as tuned.",
        "At 64 GPUs (8 nodes) the job is predicted to train 55x as fast as on 1 GPU.",
        "Bottleneck: compute; 9% of each step waits on the all-reduce."]


def planned_result() -> CheckResult:
    points = [measure(f"predicted throughput at {n} GPUs", value, "samples/s", figure=FIGURE_SCALING,
                      series="predicted", at=n, better="higher", counts="GPUs")
              for n, value in ((1, 100.0), (32, 2900.0), (64, 5500.0), (128, 9900.0))]
    return make_result("site.plan", node="cluster", title="The site's own plan", scope=Scope.CLUSTER,
                       summary=" ".join(LEAD), measurements=points, lead=LEAD)


def test_the_section_leads_with_its_sentences_and_its_chart():
    other = make_result("site.other", node="n1", status=Status.PASS,
                        measurements=[measure(f"throughput on {n}", v, "samples/s", figure=FIGURE_SCALING, series="torch", at=n)
                                      for n, v in ((1, 10.0), (2, 19.0))])
    page = html.render(make_report([other, planned_result()]))
    section = page[page.index('<article class="check" id="check-site.plan">'):]
    section = section[:section.index("</article>")]
    assert section.index(LEAD[0]) < section.index(LEAD[2]) < section.index("<svg") < section.index("<table")
    assert "GPUs" in section and "predicted (solid)" in section  # the axis counts GPUs, the caption names the line
    charts = page[page.index('<section id="charts">'):]
    charts = charts[:charts.index("</section>")]
    assert charts.count("<svg") == 1 and "site.plan" not in charts and "The site's own plan" not in charts
    assert page.count("<svg") == 2  # each chart once: the led one in its section, the other under Charts


def test_markdown_leads_with_the_same_sentences_and_json_keeps_them():
    result = planned_result()
    text = markdown.render(make_report([result]))
    block = text[text.index("### The site's own plan"):]
    assert [line[2:] for line in block.splitlines()[2:5]] == LEAD
    assert CheckResult.from_dict(result.to_dict()).lead == LEAD


def test_a_scaling_figure_says_what_it_counts():
    group = figures.figure_groups(make_report([planned_result()]))[0]
    assert group.counted == "GPUs"
    said = figures.sentence(group)
    assert said is not None and said.text.startswith("128 GPUs deliver the throughput of 99.0")


def test_the_schema_accepts_lead_and_counts():
    import json
    from importlib.resources import files

    import jsonschema

    from preflight.reporters import json_report

    schema = json.loads(files("preflight").joinpath("schema/run-report.schema.json").read_text())
    document = json.loads(json_report.render(make_report([planned_result()])))
    jsonschema.validate(document, schema)
    assert document["results"][0]["lead"] == LEAD and document["results"][0]["measurements"][0]["counts"] == "GPUs"
