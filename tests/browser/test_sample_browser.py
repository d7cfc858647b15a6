"""The sample browser, driven like a user on a real demo run (the local GRPO trainer's rollout store): open the
run's samples, pick a prompt and see its responses across steps, diff two steps, open a group whose samples
all tie, filter by score, and colour a sample's tokens by their KL contribution, entropy, train-vs-rollout
log-prob difference and advantage."""
from __future__ import annotations

import pytest

from tests.browser.browser_helpers import PASSWORD, seed_project
from tests.browser_support import login

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

STEPS = 4


@pytest.fixture
def demo_run(project, engineer, tmp_path):
    """The seeded run's directory holds a 4-step demo GRPO run (12 prompts a step, 4 samples each)."""
    from training import demo
    from training.local.train import run_job
    from webapp.monitoring import samples as sel

    engineer.set_password(PASSWORD)
    engineer.save()
    seeded = seed_project(project, engineer, tmp_path)
    model = demo.build_demo_model(tmp_path / "demo-tiny")
    run = demo.write_demo_run(seeded.job.run_dir, "grpo", model, hp_overrides={
        "max_steps": STEPS, "batch_size": 12, "group_size": 4, "test_freq": 0, "save_freq": 0})
    run_job(run, run / "metrics.jsonl")
    sel._cache.clear()
    return seeded.job


def test_browse_a_demo_runs_samples_across_steps(page, live_server, engineer, demo_run, shot):
    from webapp.monitoring import samples as sel

    job, run_dir = demo_run, demo_run.run_dir
    assert sel.steps(run_dir, "rollout") == list(range(1, STEPS + 1))
    last = sel.step_index(run_dir, "rollout", STEPS)
    first_page = last.entries[:sel.PER_PAGE]
    # a prompt on the first page that an earlier step sampled too (a new epoch repeats prompts)
    earlier = {e.prompt: s for s in range(1, STEPS) for e in sel.step_index(run_dir, "rollout", s).entries}
    key = next(e.prompt for e in first_page if e.prompt in earlier)
    tied = next(e.uid for e in first_page if sel.is_tie([last.entries[i].score for i in last.by_uid[e.uid]]))

    login(page, live_server, engineer.username, PASSWORD)
    page.goto(f"{live_server.url}/p/acme/jobs/{job.pk}/")
    page.get_by_role("tab", name="Samples").click()
    body = page.locator("#mon-samples-body")
    body.locator("[data-samples-summary]").wait_for()
    summary = body.locator("[data-samples-summary]").inner_text()
    assert f"Step {STEPS}: 48 samples of {len(last.by_prompt)} prompts, showing 1–20" in summary
    assert body.get_by_role("link", name="Training rollouts (4 steps)").get_attribute("aria-current") == "page"
    shot(page, "samples-step")

    # pick the prompt by its text, then follow it: one column per step that sampled it
    body.get_by_label("Prompt contains").fill(last.prompt_heads[key])
    body.get_by_role("button", name="Filter").click()
    page.wait_for_function("document.querySelector('[data-samples-summary]').textContent.includes('match')")
    assert body.locator("[data-sample]").count() == len(last.by_prompt[key])
    body.locator(f"[data-prompt='{key}']").first.get_by_role("link", name="Across steps").click()
    body.locator(".mon-col").first.wait_for()
    cols = body.locator(".mon-col")
    col_steps = [int(cols.nth(i).get_attribute("data-step")) for i in range(cols.count())]
    assert col_steps == [s for s in range(1, STEPS + 1) if key in sel.step_index(run_dir, "rollout", s).by_prompt]
    assert len(col_steps) >= 2 and cols.first.locator("[data-sample]").count() == 4
    assert "reward" in cols.first.inner_text() and "tokens" in cols.first.inner_text()  # reward and length shown
    shot(page, "samples-across-steps")

    # diff the first and the last column, word by word
    body.get_by_label("Diff step").select_option(str(col_steps[0]))
    body.get_by_label("with step").select_option(str(col_steps[-1]))
    body.get_by_role("button", name="Show the diff").click()
    body.locator(".mon-diff-text").wait_for()
    a = sel.sample_at(run_dir, "rollout", col_steps[0], key, 0)["output"]
    b = sel.sample_at(run_dir, "rollout", col_steps[-1], key, 0)["output"]
    assert body.locator("h3").inner_text().startswith(f"Step {col_steps[0]} → step {col_steps[-1]}")
    # without the insertions the text is step a's response, without the deletions step b's
    side = ("(sel) => { const c = document.querySelector('.mon-diff-text').cloneNode(true); "
            "c.querySelectorAll(sel).forEach((e) => e.remove()); return c.textContent; }")
    assert page.evaluate(side, "ins") == a and page.evaluate(side, "del") == b
    assert (body.locator(".mon-diff-text del, .mon-diff-text ins").count() > 0) == (a != b)
    shot(page, "samples-diff")

    # back to the step; open a group whose samples all tie
    body.get_by_role("link", name="← All samples of the step").click()
    body.locator("[data-samples-summary]").wait_for()
    card = body.locator(f"[data-sample]:has(a[href*='uid={tied.replace(':', '%3A')}'])").first
    card.get_by_role("link", name=f"Group at step {STEPS}").click()
    flag = body.locator("[data-tie-flag]")
    flag.wait_for()
    assert "All 4 samples tie" in flag.inner_text() and "no gradient" in flag.inner_text()
    assert body.locator("table.mon-group tbody tr").count() == 4
    assert set(body.locator("table.mon-group tbody tr td:nth-child(4)").all_inner_texts()) == {"0.000"}  # advantages
    shot(page, "samples-group-tie")

    # filter: only the samples that scored 1
    body.get_by_role("link", name="← All samples of the step").click()
    body.get_by_label("from", exact=True).fill("1")
    body.get_by_role("button", name="Filter").click()
    page.wait_for_function("document.querySelector('[data-samples-summary]') && "
                           "document.querySelector('[data-samples-summary]').textContent.includes('match')")
    right = sum(1 for e in last.entries if e.score == 1.0)
    verb = "matches" if right == 1 else "match"
    assert f"{right} {verb} the filters" in body.locator("[data-samples-summary]").inner_text()
    assert body.locator("[data-sample]").count() == min(right, sel.PER_PAGE)

    # the token view colours each token by policy-vs-reference log-ratio
    body.get_by_role("link", name="Clear filters").click()
    page.wait_for_function("!document.querySelector('[data-samples-summary]').textContent.includes('match')")
    body.locator("[data-sample]").first.get_by_role("link", name="Tokens").click()
    body.locator(".mon-tokens").wait_for()
    first = sel.entry_at(run_dir, "rollout", STEPS, first_page[0].offset)
    toks = body.locator(".mon-tok")
    assert toks.count() == len(first["tokens"]) > 0
    assert [float(v) for v in toks.evaluate_all("(els) => els.map((e) => e.dataset.logratio)")] == pytest.approx(
        first["token_logratio"])
    assert "rgba(" in (toks.first.get_attribute("style") or "")
    shot(page, "samples-tokens")

    # the same tokens by entropy, by advantage and by train-vs-rollout difference (the local trainer logs all)
    for label, key in (("Entropy", "token_entropy"), ("Train − rollout", "token_logprob_diff")):
        body.get_by_role("link", name=label).click()
        page.wait_for_function(f"document.querySelector('[data-token-legend]')?.dataset.tokenLegend === "
                               f"'{'entropy' if key == 'token_entropy' else 'mismatch'}'")
        values = toks.evaluate_all("(els) => els.map((e) => Number(e.dataset.value))")
        assert values == pytest.approx(first[key], abs=1e-4) and len(values) == len(first["tokens"])
        assert body.get_by_role("link", name=label).get_attribute("aria-current") == "true"
    assert all(v >= 0 for v in first["token_entropy"]) and max(first["token_entropy"]) > 0
    assert all(abs(v) < 1e-3 for v in first["token_logprob_diff"])  # the sampler used the trained weights
    shot(page, "samples-tokens-mismatch")
    body.get_by_role("link", name="Advantage").click()
    page.wait_for_function("document.querySelector('[data-token-legend]')?.dataset.tokenLegend === 'advantage'")
    values = toks.evaluate_all("(els) => els.map((e) => Number(e.dataset.value))")
    assert values == pytest.approx([first["advantage"]] * len(first["tokens"]), abs=1e-4)
    assert "whole response has one colour" in body.locator("[data-token-legend]").inner_text()
