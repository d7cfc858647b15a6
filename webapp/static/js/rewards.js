// Reward editor: CodeMirror (vendored), failing-line marks, static check, test-runs, score histograms.
(function () {
  'use strict';
  const editors = [];

  function parseLines(value) {
    return (value || '').split(',').map((s) => parseInt(s, 10)).filter((n) => n > 0);
  }

  function markLines(cm, lines, messages) {
    cm.operation(() => {
      (cm._wbMarked || []).forEach((h) => { cm.removeLineClass(h, 'background', 'cm-error-line'); });
      cm.clearGutter('wb-error-gutter');
      cm._wbMarked = [];
      lines.forEach((line) => {
        if (line < 1 || line > cm.lineCount()) return;
        const handle = cm.addLineClass(line - 1, 'background', 'cm-error-line');
        cm._wbMarked.push(handle);
        const marker = document.createElement('span');
        marker.className = 'wb-error-marker';
        marker.textContent = '●';
        marker.title = (messages && messages[line]) || 'This line failed';
        cm.setGutterMarker(line - 1, 'wb-error-gutter', marker);
      });
    });
    if (lines.length) cm.scrollIntoView({line: lines[0] - 1, ch: 0}, 80);
  }

  function focusNext(from) {
    const all = Array.from(document.querySelectorAll('a[href], button, input, select, textarea, [tabindex]'))
      .filter((el) => !el.disabled && el.tabIndex >= 0 && el.offsetParent !== null);
    const i = all.indexOf(from);
    if (i >= 0 && all[i + 1]) all[i + 1].focus();
  }

  function initEditor(textarea) {
    if (!window.CodeMirror) return null;
    const readOnly = textarea.hasAttribute('data-readonly');
    const cm = window.CodeMirror.fromTextArea(textarea, {
      mode: 'python', lineNumbers: true, indentUnit: 4, tabSize: 4, indentWithTabs: false,
      matchBrackets: true, styleActiveLine: !readOnly, readOnly: readOnly,
      gutters: ['wb-error-gutter', 'CodeMirror-linenumbers'], viewportMargin: Infinity,
      extraKeys: {
        Tab: (c) => (c.somethingSelected() ? c.indentSelection('add') : c.replaceSelection('    ', 'end')),
        'Shift-Tab': (c) => c.indentSelection('subtract'),
        'Ctrl-/': 'toggleComment', 'Cmd-/': 'toggleComment',
        // Keyboard users leave the editor with Esc (Tab indents inside it).
        Esc: (c) => { c.getInputField().blur(); focusNext(c.getInputField()); },
      },
    });
    const label = document.querySelector('label[for="' + textarea.id + '"]');
    if (label) cm.getInputField().setAttribute('aria-label', label.textContent.trim());
    cm.on('change', () => cm.save());
    const holder = textarea.closest('[data-error-lines]');
    if (holder) markLines(cm, parseLines(holder.getAttribute('data-error-lines')));
    editors.push(cm);
    return cm;
  }

  function drawHistograms(root) {
    if (!window.Plotly) return;
    (root || document).querySelectorAll('[data-histogram]').forEach((div) => {
      const script = div.nextElementSibling;
      if (!script || script.type !== 'application/json') return;
      const data = JSON.parse(script.textContent);
      const all = [].concat(...data.traces.map((t) => t.scores));
      if (!all.length) { div.textContent = 'No scores to plot: every sample failed.'; return; }
      // Shared bins over [min(0, lo), max(1, hi)]: most rewards live in [0, 1], and a run whose
      // scores are all equal still gets narrow, readable bars.
      const lo = Math.min(0, ...all);
      const hi = Math.max(1, ...all);
      const size = (hi - lo) / 20;
      const traces = data.traces.filter((t) => t.scores.length).map((t) => ({
        type: 'histogram', name: t.name, x: t.scores, opacity: data.traces.length > 1 ? 0.65 : 1,
        xbins: {start: lo - size / 2, end: hi + size / 2, size: size},
      }));
      // Counts are whole numbers: integer ticks (one per sample while the bars are short).
      let most = 0;
      data.traces.forEach((t) => {
        const bins = new Map();
        t.scores.forEach((v) => { const b = Math.floor((v - lo + size / 2) / size); bins.set(b, (bins.get(b) || 0) + 1); });
        bins.forEach((n) => { most = Math.max(most, n); });
      });
      const yaxis = {title: {text: 'samples'}, rangemode: 'tozero', tickformat: ',d'};
      if (most <= 10) Object.assign(yaxis, {dtick: 1, range: [0, most + 0.5]});
      window.Plotly.newPlot(div, traces, {
        barmode: 'overlay', height: 260, margin: {t: 30, r: 10, b: 40, l: 50}, title: {text: 'Score distribution', font: {size: 14}},
        xaxis: {title: {text: 'score'}, range: [lo - size, hi + size]}, yaxis, showlegend: traces.length > 1,
      }, {responsive: true, displaylogo: false});
    });
  }

  function showFieldErrors(form, err) {
    form.querySelectorAll('[data-field-error]').forEach((p) => { p.hidden = true; p.textContent = ''; });
    const field = (err.body && err.body.field) || '_all';
    let slot = form.querySelector('[data-field-error="' + field + '"]') || form.querySelector('[data-field-error="_all"]');
    let message = err.message;
    if (err.body && !err.body.detail && typeof err.body === 'object') {
      message = Object.entries(err.body).map(([k, v]) => k + ': ' + [].concat(v).join(' ')).join('; ');
    }
    slot.textContent = message;
    slot.hidden = false;
  }

  // A test-run is scored on a worker: poll it until it has finished, showing how far it got.
  async function followTestRun(run, status) {
    let wait = 300;
    while (run.state === 'queued' || run.state === 'running') {
      status.textContent = run.state === 'queued' ? 'Queued for a worker…'
        : 'Running in the sandbox… ' + run.done_count + ' of ' + window.wb.count(run.sample_count, 'sample');
      await new Promise((resolve) => setTimeout(resolve, wait));
      wait = Math.min(1000, wait + 100);
      run = await window.wb.get(run.api_url);
    }
    return run;
  }

  // A page opened on an unfinished test-run (the form without JavaScript, a permalink): follow it in place.
  async function followShownTestRun() {
    const marker = document.querySelector('[data-test-run-follow]');
    if (!marker) return;
    const section = marker.closest('section');
    let run = await window.wb.get(marker.getAttribute('data-test-run-follow'));
    await followTestRun(run, marker);
    const resp = await fetch(marker.getAttribute('data-results-url'), {credentials: 'same-origin'});
    const holder = document.createElement('div');
    holder.innerHTML = await resp.text();
    const fresh = holder.querySelector('section');
    section.replaceWith(fresh);
    window.wb.localTimes(fresh);
    drawHistograms(fresh);
  }

  // Probes run on a worker after a save: follow them, then show the verdicts in place of "probes pending".
  async function followProbes() {
    const section = document.querySelector('[data-probes-follow]');
    if (!section) return;
    let wait = 300;
    for (let i = 0; i < 300; i++) {
      await new Promise((resolve) => setTimeout(resolve, wait));
      wait = Math.min(2000, wait + 200);
      let status;
      try { status = await window.wb.get(section.getAttribute('data-probes-follow')); } catch (e) { continue; }
      if (status.state !== 'pending') break;
    }
    const resp = await fetch(section.getAttribute('data-probes-fragment'), {credentials: 'same-origin'});
    if (!resp.ok) return;
    const holder = document.createElement('div');
    holder.innerHTML = await resp.text();
    const fresh = holder.querySelector('section');
    section.replaceWith(fresh);
    window.wb.localTimes(fresh);
    const state = fresh.querySelector('#probe-state');
    const badge = document.querySelector('[data-version-probes="' + fresh.getAttribute('data-version') + '"]');
    if (state && badge) { badge.textContent = state.textContent; badge.className = state.className; }
    if (fresh.hasAttribute('data-probes-follow')) followProbes();
  }

  function setupTestRun(cm) {
    const form = document.getElementById('test-run-form');
    if (!form) return;
    form.addEventListener('submit', async (ev) => {
      ev.preventDefault();
      const button = document.getElementById('test-run-button');
      const status = document.getElementById('test-run-status');
      const entry = document.getElementById('id_entry_point');
      const payload = {
        source: cm ? cm.getValue() : undefined,
        entry_point: entry ? entry.value : '',
        dataset_version: form.dataset_version.value ? parseInt(form.dataset_version.value, 10) : null,
        split: form.split.value,
        limit: form.limit.value ? parseInt(form.limit.value, 10) : null,
      };
      if (!payload.source && form.version.value) payload.version = parseInt(form.version.value, 10);
      if (form.responses.value.trim()) payload.responses = form.responses.value;
      if (form.rollout_run && form.rollout_run.value) payload.rollout_run = parseInt(form.rollout_run.value, 10);
      if (form.rollout_step && form.rollout_step.value) payload.rollout_step = parseInt(form.rollout_step.value, 10);
      if (form.sample_model && form.sample_model.value) payload.sample_model = parseInt(form.sample_model.value, 10);
      form.querySelectorAll('[data-field-error]').forEach((p) => { p.hidden = true; });
      button.disabled = true;
      status.textContent = 'Queued for a worker…';
      try {
        let run = await window.wb.post(form.getAttribute('data-api-url'), payload);
        run = await followTestRun(run, status);
        const resp = await fetch(run.results_url, {credentials: 'same-origin'});
        const area = document.getElementById('test-run-area');
        area.innerHTML = await resp.text();
        window.wb.localTimes(area);
        drawHistograms(area);
        const lines = [];
        const messages = {};
        if (run.error_lineno) { lines.push(run.error_lineno); messages[run.error_lineno] = run.error; }
        (run.results || []).forEach((r) => {
          if (r.lineno && !messages[r.lineno]) { lines.push(r.lineno); messages[r.lineno] = r.error; }
        });
        if (cm) markLines(cm, lines, messages);
        const s = run.summary && run.summary.all;
        status.textContent = run.state === 'failed' ? 'The reward could not run: ' + run.error
          : 'Done: ' + window.wb.count(run.sample_count, 'sample') + ' in ' + Math.round(run.duration_ms) + ' ms' +
            // fewer rows than asked: say so, or 100 asked and 36 scored reads as samples lost
            (run.limit && run.sample_count < run.limit ? ` (every row there is: ${run.limit} were asked)` : '') +
            (s && s.errors ? ', ' + run.state_words : '') +
            (run.is_reference_check ? ' (a reference check: each ground truth scored against itself)' : '') + '.';
        area.querySelector('section').scrollIntoView({behavior: 'smooth', block: 'start'});
      } catch (err) {
        status.textContent = '';
        showFieldErrors(form, err);
        if (err.body && err.body.lineno && cm) markLines(cm, [err.body.lineno], {[err.body.lineno]: err.message});
      } finally {
        button.disabled = false;
      }
    });
    form.dataset.ready = 'true';  // submitted before this, the form posts without scripts and leaves the page
  }

  function setupCheck(cm) {
    const button = document.getElementById('check-button');
    const form = document.getElementById('save-form');
    if (!button || !form || !cm) return;
    button.addEventListener('click', async () => {
      const out = document.getElementById('check-output');
      const entry = document.getElementById('id_entry_point');
      try {
        const res = await window.wb.post(form.getAttribute('data-check-url'),
          {source: cm.getValue(), entry_point: entry ? entry.value : 'compute_score'});
        out.innerHTML = '';
        const messages = {};
        const p = document.createElement('p');
        p.className = res.ok ? 'msg-success' : 'field-error';
        p.textContent = res.ok ? (res.problems.length ? 'It can be saved, with warnings:' : 'No problems found.')
          : 'It cannot be saved:';
        out.appendChild(p);
        const ul = document.createElement('ul');
        res.problems.forEach((pr) => {
          const li = document.createElement('li');
          li.textContent = (pr.lineno ? 'Line ' + pr.lineno + ': ' : '') + pr.message + (pr.severity === 'warning' ? ' (warning)' : '');
          ul.appendChild(li);
          if (pr.lineno) messages[pr.lineno] = pr.message;
        });
        out.appendChild(ul);
        markLines(cm, Object.keys(messages).map(Number), messages);
      } catch (err) {
        out.textContent = err.message;
      }
    });
  }

  function setupTemplates(cm) {
    const select = document.getElementById('template-insert');
    const data = document.getElementById('reward-templates');
    if (!select || !data || !cm) return;
    const templates = JSON.parse(data.textContent);
    select.addEventListener('change', () => {
      const t = templates.find((x) => x.name === select.value);
      select.value = '';
      if (!t) return;
      if (cm.getValue().trim() && !window.confirm('Replace the editor content with the template "' + t.title + '"?')) return;
      cm.setValue(t.source);
      markLines(cm, []);
      cm.focus();
    });
  }

  document.addEventListener('DOMContentLoaded', () => {
    document.querySelectorAll('textarea[data-code-editor]').forEach(initEditor);
    const main = editors.find((cm) => !cm.getOption('readOnly')) || null;
    setupTestRun(main);
    setupCheck(main);
    setupTemplates(main);
    drawHistograms(document);
    followShownTestRun();
    followProbes();
    window.wbRewards = {editors, markLines, drawHistograms};
  });
})();
