// The job monitor panel: live curves, zoom re-fetch, tabs, samples, rollback dialog.
(function () {
  const cfgEl = document.getElementById('monitor-config');
  const root = document.getElementById('monitor');
  if (!cfgEl || !root || !window.Plotly) return;
  const cfg = JSON.parse(cfgEl.textContent);
  const C = window.wbCharts;
  const $ = (sel) => root.querySelector(sel);
  const KEY = 'wb.monitor.';
  const settings = Object.assign({smoothing: 0.6, xmode: 'step', log: false, live: true},
    JSON.parse(localStorage.getItem(KEY + 'settings') || '{}'));
  const extraKey = KEY + 'extra.' + cfg.kind;
  let extra = JSON.parse(localStorage.getItem(extraKey) || '[]');

  const data = {};       // name -> {step, value, time}
  const inherited = {};  // name -> the ancestors' points up to the branch step (a rolled-back run's past)
  const zoom = {};       // chart id -> {series: {...}} at full resolution for the visible range
  const zoomAsked = {};  // chart id -> seq of its latest zoom or reset: an older read that lands late is dropped
  let events = cfg.events || [];
  let marks = cfg.marks || {evaluations: [], human: []};
  let lastStep = 0, lastEventId = events.reduce((m, e) => Math.max(m, e.id), 0);
  // No live poll before the first full read (it would append every point, not the downsampled ones);
  // zoomSeq orders zoom reads after a full re-read so that a newer zoom survives it.
  let t0 = null, polling = false, loaded = false, loading = false, zoomSeq = 0, isActive = cfg.isActive;

  // -- tabs -----------------------------------------------------------------------------------
  const tabs = Array.from(root.querySelectorAll('[role=tab]'));
  function showTab(tab) {
    tabs.forEach((t) => {
      const on = t === tab;
      t.setAttribute('aria-selected', on ? 'true' : 'false');
      t.tabIndex = on ? 0 : -1;
      document.getElementById(t.getAttribute('aria-controls')).hidden = !on;
    });
    if (tab.dataset.tab === 'curves') renderAll();
    if (tab.dataset.tab === 'samples') loadSamples();
    history.replaceState(null, '', '#' + tab.dataset.tab);
  }
  tabs.forEach((t, i) => {
    t.addEventListener('click', () => showTab(t));
    t.addEventListener('keydown', (e) => {
      const d = e.key === 'ArrowRight' ? 1 : e.key === 'ArrowLeft' ? -1 : 0;
      if (d) { const n = tabs[(i + d + tabs.length) % tabs.length]; n.focus(); showTab(n); }
    });
  });

  // -- charts ---------------------------------------------------------------------------------
  function chartForMetric(name) {
    // a share of a whole goes on a 0–100 % axis (the same rule as webapp/monitoring/charts.py's unit_for)
    const unit = /(frac|fraction|accuracy|agreement|win_rate)$/.test(name) ? 'rate' : '';
    return {id: 'm_' + name.replace(/[^A-Za-z0-9]+/g, '_'), title: name, extra: true, unit, threshold: null,
            series: [{name, label: name, band: null, count: null}]};
  }
  function charts() { return cfg.charts.concat(extra.map(chartForMetric)); }

  function namesOf(list) {
    const names = new Set(), lower = new Set(), upper = new Set();
    list.forEach((c) => c.series.forEach((s) => {
      names.add(s.name);
      if (s.count) names.add(s.count);
      if (s.parts) Object.values(s.parts).forEach((n) => names.add(n));
      if (s.band) { lower.add(s.band[0]); upper.add(s.band[1]); }
    }));
    return {names: [...names], lower: [...lower], upper: [...upper]};
  }
  function query(list, extraParams) {
    const n = namesOf(list);
    const p = new URLSearchParams(Object.assign({names: n.names.join(','), lower: n.lower.join(','),
      upper: n.upper.join(','), points: String(pointsWanted())}, extraParams || {}));
    return p.toString();
  }
  function pointsWanted() {
    const grid = $('#mon-charts');
    return Math.max(300, Math.min(4000, Math.round((grid ? grid.clientWidth : 1500) || 1500)));
  }

  function store(series) {
    Object.entries(series).forEach(([name, s]) => {
      data[name] = {step: s.step, value: s.value, time: s.time, downsampled: s.downsampled, total: s.total};
      if (s.time.length && s.time[0] !== null) t0 = t0 === null ? s.time[0] : Math.min(t0, s.time[0]);
    });
  }
  function append(series) {
    let changed = false;
    Object.entries(series).forEach(([name, s]) => {
      if (!s.step.length) return;
      const d = data[name] || (data[name] = {step: [], value: [], time: [], total: 0});
      // live increments arrive after what we have; a re-logged step (restore) triggers a full reload instead
      for (let i = 0; i < s.step.length; i++) {
        if (d.step.length && s.step[i] <= d.step[d.step.length - 1]) continue;
        d.step.push(s.step[i]); d.value.push(s.value[i]); d.time.push(s.time[i]);
        d.total += 1; changed = true;
      }
      if (s.time.length && s.time[0] !== null && t0 === null) t0 = s.time[0];
    });
    return changed;
  }

  function seriesFor(chart, name) {
    const z = zoom[chart.id];
    return (z && z.series[name]) || data[name] || {step: [], value: [], time: []};
  }

  function tracesFor(chart) {
    const traces = [];
    const w = chart.smooth === false ? 0 : (Number(settings.smoothing) || 0);
    chart.series.forEach((s, i) => {
      const color = C.COLORS[i % C.COLORS.length];
      const d = seriesFor(chart, s.name);
      if (s.band) {
        const lo = seriesFor(chart, s.band[0]), hi = seriesFor(chart, s.band[1]);
        if (lo.step.length && hi.step.length) {
          traces.push({type: 'scatter', mode: 'lines', x: C.xOf(lo, settings.xmode, t0), y: lo.value,
                       line: {width: 0, color}, hoverinfo: 'skip', showlegend: false});
          traces.push({type: 'scatter', mode: 'lines', x: C.xOf(hi, settings.xmode, t0), y: hi.value, fill: 'tonexty',
                       fillcolor: C.rgba(color, 0.15), line: {width: 0, color}, hoverinfo: 'skip',
                       name: `${s.label} range`, showlegend: false});
        }
      }
      let custom;
      if (s.parts) custom = C.partsText(d, (n) => seriesFor(chart, n), s);
      else if (s.count) {
        const counts = new Map();
        const cs = seriesFor(chart, s.count);
        cs.step.forEach((st, j) => counts.set(st, cs.value[j]));
        custom = d.step.map((st) => (counts.has(st) ? counts.get(st) : '?'));
      }
      const hover = s.parts ? '%{y:.1%} (%{customdata})' : custom ? '%{y:.6g} (n=%{customdata})' : '%{y:.6g}';
      const past = inherited[s.name];
      if (past && past.step.length && settings.xmode === 'step') {
        traces.push({type: 'scatter', mode: 'lines', x: past.step, y: past.value, name: `${s.label} (before the branch)`,
                     line: {color, width: 1, dash: 'dot'}, opacity: 0.6,
                     hovertemplate: `%{y:.6g}<extra>${s.label}, parent run</extra>`});
      }
      const x = C.xOf(d, settings.xmode, t0);
      traces.push({type: 'scatter', mode: d.step.length < 3 ? 'lines+markers' : 'lines', x, y: d.value,
                   customdata: custom, name: w ? `${s.label} (raw)` : s.label, opacity: w ? 0.28 : 1,
                   line: {color, width: 1}, hovertemplate: `${hover}<extra>${w ? 'raw ' : ''}${s.label}</extra>`,
                   showlegend: !w});
      if (w) {
        traces.push({type: 'scatter', mode: 'lines', x, y: C.ema(d.value, w), name: s.label,
                     line: {color, width: 2}, hovertemplate: '%{y:.4g}<extra>' + s.label + ' (smoothed)</extra>'});
      }
    });
    if (chart.id === 'win_rate') {
      traces.push(...C.shareTraces(chart, (n) => seriesFor(chart, n), settings.xmode, t0));
      [['evaluations', 'on-demand eval', 'diamond', '#0f8fa8'], ['human', 'human', 'star', '#c2410c'],
       ['judges', 'auto judge', 'circle-open', '#6d28d9']].forEach(
        ([key, label, symbol, color]) => {
          const pts = (marks[key] || []).filter((p) => p.rate !== null);
          if (!pts.length || settings.xmode !== 'step') return;
          // who judged, against what, W/T/L: the human and judge marks of one evaluation sit side by side
          const what = (p) => [p.label, p.opponent ? 'vs ' + p.opponent : '',
            p.bias != null ? `position bias ${Math.round(p.bias * 100)}%` : '',
            p.flagged ? 'REWARD MAY BE HACKED' : ''].filter(Boolean).join(' · ');
          traces.push({type: 'scatter', mode: 'markers', name: label, x: pts.map((p) => p.step), y: pts.map((p) => p.rate),
                       marker: {symbol, size: 11, color, line: {width: pts.map((p) => (p.flagged ? 3 : 1)), color}},
                       customdata: pts.map((p) => [p.wins === null || p.wins === undefined ? `n=${p.n}`
                         : `W ${p.wins} · T ${p.ties} · L ${p.losses} of ${p.n}`, what(p)]),
                       error_y: {type: 'data', symmetric: false, array: pts.map((p) => p.hi - p.rate),
                                 arrayminus: pts.map((p) => p.rate - p.lo), color, thickness: 1.5},
                       hovertemplate: `${label}: %{y:.1%} (%{customdata[0]}) %{customdata[1]}<extra></extra>`});
        });
    }
    return traces;
  }

  // A health rule's trip is drawn on the charts of its metric (on every chart when none shows it).
  function onChart(ev, chart) {
    const metric = ev.kind === 'guard_rule' && ev.data && ev.data.metric;
    if (!metric) return true;
    const has = (c) => c.series.some((s) => s.name === metric);
    return has(chart) || !charts().some(has);
  }

  function layoutFor(chart) {
    const layout = C.baseLayout(chart.title, {xmode: settings.xmode, log: settings.log, unit: chart.unit});
    const deco = C.eventDecorations(events.filter((e) => onChart(e, chart)), settings.xmode, t0);
    layout.shapes = deco.shapes.slice();
    if (chart.threshold) {
      layout.shapes.push({type: 'line', xref: 'paper', x0: 0, x1: 1, y0: chart.threshold.value, y1: chart.threshold.value,
                          line: {color: '#b42318', width: 1.5, dash: 'dash'}});
      layout.annotations = [{xref: 'paper', x: 1, y: chart.threshold.value, yanchor: 'bottom', xanchor: 'right',
                             text: chart.threshold.label, showarrow: false, font: {size: 10, color: '#b42318'}}];
    }
    const hasMarks = chart.id === 'win_rate' && Object.values(marks).some((l) => (l || []).some((p) => p.rate !== null));
    const empty = !hasMarks && chart.series.every((s) => !seriesFor(chart, s.name).step.length &&
                                         !(inherited[s.name] && inherited[s.name].step.length));
    if (empty) {  // no axes, lines or markers to read: just say why
      layout.xaxis.visible = false; layout.yaxis.visible = false; layout.shapes = []; layout.showlegend = false;
      layout.annotations = [{xref: 'paper', yref: 'paper', x: 0.5, y: 0.5, showarrow: false,
        text: isActive ? 'No points yet: they appear here as the run logs them.' :
          'This run logged no values for this chart.', font: {color: '#5b6470'}}];
      return {layout, eventTraces: []};
    }
    if (!settings.log && !zoom[chart.id]) {
      const values = [];
      chart.series.forEach((s) => [s.name].concat(s.band || []).forEach((n) => {
        values.push(...seriesFor(chart, n).value);
        if (inherited[n]) values.push(...inherited[n].value);
      }));
      Object.assign(layout.yaxis, C.yAxisFor(values, chart.unit) || {});
    }
    return {layout, eventTraces: deco.traces};
  }

  const rendered = new Set();
  function render(chart) {
    const div = document.getElementById('chart-' + chart.id);
    if (!div || div.closest('[hidden]')) return;
    const {layout, eventTraces} = layoutFor(chart);
    Plotly.react(div, tracesFor(chart).concat(eventTraces), layout, C.PLOT_CONFIG);
    const note = chart.note && document.getElementById('note-' + chart.id);
    if (note) note.textContent = C.chartNote(chart, (n) => seriesFor(chart, n));
    if (!rendered.has(chart.id)) {
      rendered.add(chart.id);
      div.on('plotly_relayout', (ev) => onRelayout(chart, ev));
    }
  }
  function renderAll() { charts().forEach(render); }

  function buildGrid() {
    const grid = $('#mon-charts');
    grid.textContent = '';
    rendered.clear();
    charts().forEach((chart) => {
      const card = document.createElement('div');
      card.className = 'mon-chart';
      const div = document.createElement('div');
      div.id = 'chart-' + chart.id;
      div.setAttribute('role', 'img');
      div.setAttribute('aria-label', chart.title + ' chart');
      card.appendChild(div);
      if (chart.note) {
        const note = document.createElement('p');
        note.id = 'note-' + chart.id; note.className = 'muted mon-chart-note'; note.textContent = chart.note;
        card.appendChild(note);
      }
      if (chart.extra) {
        const rm = document.createElement('button');
        rm.type = 'button'; rm.className = 'linklike mon-remove'; rm.textContent = 'Remove';
        rm.setAttribute('aria-label', 'Remove chart ' + chart.title);
        rm.addEventListener('click', () => {
          extra = extra.filter((n) => n !== chart.series[0].name);
          localStorage.setItem(extraKey, JSON.stringify(extra));
          buildGrid(); renderAll();
        });
        card.appendChild(rm);
      }
      grid.appendChild(card);
    });
  }

  // -- zoom: fetch the visible range at full resolution -----------------------------------------
  async function onRelayout(chart, ev) {
    if (ev['xaxis.autorange']) {  // reset axes; a resize ({autosize}) keeps the zoomed range and its points
      zoomAsked[chart.id] = ++zoomSeq;
      if (zoom[chart.id]) { delete zoom[chart.id]; render(chart); }
      return;
    }
    if (!('xaxis.range[0]' in ev)) return;
    const needed = namesOf([chart]);
    const all = needed.names.concat(needed.lower, needed.upper);
    if (!all.some((n) => data[n] && data[n].downsampled)) return;  // already every point
    let a = ev['xaxis.range[0]'], b = ev['xaxis.range[1]'], params;
    if (settings.xmode === 'step') params = {x0: a, x1: b};
    else if (settings.xmode === 'time') params = {t0: Date.parse(a) / 1000, t1: Date.parse(b) / 1000};
    else params = {t0: t0 + a * 3600, t1: t0 + b * 3600};
    const seq = zoomAsked[chart.id] = ++zoomSeq;
    try {
      const r = await wb.get(cfg.api + 'metrics/?' + query([chart], params));
      if (zoomAsked[chart.id] !== seq) return;
      zoom[chart.id] = {series: r.series, seq};
      render(chart);
    } catch (e) { status('Could not load the zoomed range: ' + e.message, true); }
  }

  // A rolled-back run continues its parent's curve: fetch the parent's points up to the branch step.
  async function loadAncestors() {
    const list = cfg.ancestors || [];
    if (!list.length) return;
    const parts = [];
    for (const a of list) {
      const params = {x1: String(a.to), x0: String(a.from === null ? -1e12 : a.from + 1)};
      try { parts.push((await wb.get(a.api + 'metrics/?' + query(charts(), params))).series); } catch (e) { return; }
    }
    parts.forEach((series) => Object.entries(series).forEach(([name, s]) => {
      const d = inherited[name] || (inherited[name] = {step: [], value: [], time: []});
      d.step.push(...s.step); d.value.push(...s.value); d.time.push(...s.time);
    }));
    renderAll();
  }

  // -- loading and live polling ------------------------------------------------------------------
  // The job page's progress card shows the step of the same poll as the charts (one number on the page).
  function announceStep(step) {
    document.dispatchEvent(new CustomEvent('wb:run-step', {detail: {step}}));
  }
  function status(text, isError) {
    const el = $('#mon-status');
    if (el) { el.textContent = text; el.classList.toggle('field-error', !!isError); }
  }

  async function loadAll() {
    const before = zoomSeq, reread = loaded;
    loading = true;
    try {
      const r = await wb.get(cfg.api + 'metrics/?' + query(charts()));
      Object.keys(zoom).forEach((k) => { if (zoom[k].seq <= before) delete zoom[k]; });
      store(r.series);
      loaded = true;
      lastStep = r.last_step || 0;
      renderAll();
      status(isActive ? `Live · step ${lastStep}` : `Finished (${cfg.state}) · last step ${lastStep}`);
      // The read may hold metrics logged after the page's names were read (a finished run's were all read then).
      if (lastStep && (isActive || reread)) refreshNames();
    } catch (e) { status('Could not load the metrics: ' + e.message, true); }
    loading = false;
  }

  async function poll() {
    if (!loaded) { if (!loading) loadAll(); return; }  // the first read failed: try it again
    if (polling || !settings.live || document.hidden) return;
    polling = true;
    try {
      const r = await wb.get(cfg.api + 'live/?' + query(charts(), {since_step: String(lastStep),
                                                                    since_event: String(lastEventId)}));
      let reload = r.job_last_step < lastStep;  // a restore went back in steps: re-read everything
      if (r.events.length) {
        r.events.forEach((e) => { lastEventId = Math.max(lastEventId, e.id); prependHistory(e); });
        events = events.concat(r.events);
        if (r.events.some((e) => ['guard_rule', 'rollback', 'resume', 'evaluation'].includes(e.kind))) {
          reload = true;
          try { marks = (await wb.get(cfg.api + 'events/')).marks; } catch (e) { /* keep the old marks */ }
        }
      }
      let changed = false;
      if (reload) { await loadAll(); }
      else {
        changed = append(r.series);
        lastStep = Math.max(lastStep, r.last_step || 0);
        if (changed || r.events.length) renderAll();
      }
      document.dispatchEvent(new CustomEvent('monitor:live', {detail: r}));
      if (r.checkpoints_key && r.checkpoints_key !== checkpointsKey) refreshCheckpoints(r.checkpoints_key);
      const offline = document.getElementById('worker-offline');
      if (offline && r.worker_online !== undefined) offline.hidden = !!r.worker_online;
      const step = r.job_last_step === undefined || r.job_last_step === null ? lastStep : r.job_last_step;
      announceStep(step);
      if (isActive && !r.is_active) { isActive = false; status(`Finished (${r.state}) · last step ${step}`); }
      else if (isActive) status(`Live · step ${step} · updated ${new Date().toLocaleTimeString()}`);
      if (changed) refreshNames();  // a re-read (reload) reads them itself
    } catch (e) { status('Live update failed (' + e.message + '); retrying.', true); }
    polling = false;
  }

  function prependHistory(ev) {
    const list = document.getElementById('mon-history-list');
    if (!list) return;
    const li = document.createElement('li');
    const kind = document.createElement('span');
    kind.className = 'mon-kind mon-kind-' + ev.kind; kind.textContent = ev.kind;
    const text = document.createElement('span');
    text.textContent = ` ${ev.step !== null ? 'step ' + ev.step + ' · ' : ''}${ev.message}`;
    li.append(kind, text);
    list.prepend(li);
    const empty = document.getElementById('mon-history-empty');
    if (empty) empty.remove();
  }

  // -- controls -----------------------------------------------------------------------------------
  function saveSettings() { localStorage.setItem(KEY + 'settings', JSON.stringify(settings)); }
  const smooth = $('#mon-smoothing'), smoothOut = $('#mon-smoothing-value');
  smooth.value = settings.smoothing; smoothOut.textContent = Number(settings.smoothing).toFixed(2);
  smooth.addEventListener('input', () => {
    settings.smoothing = Number(smooth.value); smoothOut.textContent = settings.smoothing.toFixed(2);
    saveSettings(); renderAll();
  });
  const xsel = $('#mon-xaxis');
  xsel.value = settings.xmode;
  xsel.addEventListener('change', () => {
    settings.xmode = xsel.value; saveSettings();
    Object.keys(zoom).forEach((k) => delete zoom[k]);
    renderAll();
  });
  const logBox = $('#mon-log');
  logBox.checked = !!settings.log;
  logBox.addEventListener('change', () => { settings.log = logBox.checked; saveSettings(); renderAll(); });
  const liveBox = $('#mon-live');
  liveBox.checked = !!settings.live;
  liveBox.addEventListener('change', () => { settings.live = liveBox.checked; saveSettings(); if (settings.live) poll(); });

  const picker = $('#mon-add');
  let knownNames = cfg.names || [], namesAt = 0;
  function fillPicker(names) {
    knownNames = names;
    const shown = new Set(charts().flatMap((c) => c.series.map((s) => s.name)));
    const keep = picker.value;
    picker.textContent = '';
    const first = document.createElement('option');
    first.value = ''; first.textContent = names.length ? 'Add a chart…' : 'No metrics logged yet';
    picker.appendChild(first);
    names.filter((n) => !shown.has(n)).forEach((n) => {
      const o = document.createElement('option'); o.value = n; o.textContent = n; picker.appendChild(o);
    });
    picker.value = keep;
  }
  // New metrics appear while a run goes on: re-read the names as points arrive (at most every 5 s: points
  // that arrive sooner are read once the 5 s are up, or a metric new in a run's last steps would never show),
  // but not under the user's hand (an open list would close; focusing it reads them anyway).
  let namesTimer = null;
  async function refreshNames(force) {
    if (!force && document.activeElement === picker) return;
    const wait = 5000 - (Date.now() - namesAt);
    if (!force && wait > 0) {
      if (!namesTimer) namesTimer = setTimeout(() => { namesTimer = null; refreshNames(); }, wait);
      return;
    }
    namesAt = Date.now();
    try { const r = await wb.get(cfg.api + 'metric-names/'); fillPicker(r.names); } catch (e) { /* keep the list */ }
  }
  fillPicker(knownNames);
  picker.addEventListener('focus', () => refreshNames(true));
  picker.addEventListener('change', async () => {
    const name = picker.value;
    if (!name) return;
    extra.push(name);
    localStorage.setItem(extraKey, JSON.stringify(extra));
    buildGrid();
    const r = await wb.get(cfg.api + 'metrics/?' + query([chartForMetric(name)]));
    store(r.series);
    renderAll();
    fillPicker(knownNames);
    document.getElementById('chart-' + chartForMetric(name).id).scrollIntoView({block: 'nearest'});
  });

  // -- samples tab: the sample browser (monitor-samples.js) loads when the tab is first shown ----------
  function loadSamples() { if (window.wbSamples) window.wbSamples.show(); }

  // -- checkpoints tab: the rollback dialog, and a live table ------------------------------------
  function bindCheckpoints() {
    const dialog = document.getElementById('mon-rollback');
    if (!dialog || !dialog.showModal) return;
    root.querySelectorAll('a.js-rollback').forEach((a) => a.addEventListener('click', (e) => {
      e.preventDefault();
      const form = dialog.querySelector('form');
      form.action = a.href;
      dialog.querySelector('[data-rollback-step]').textContent = a.dataset.step;
      dialog.showModal();
      const reason = form.querySelector('textarea'); if (reason) reason.focus();
    }));
    dialog.querySelector('[data-close]').addEventListener('click', () => dialog.close());
  }
  let checkpointsKey = cfg.checkpointsKey, refreshing = false;
  // Re-read the table when the live poll says it changed (a checkpoint saved, an evaluation done...);
  // not while the user is in the middle of something there (the dialog open, a field focused).
  async function refreshCheckpoints(key) {
    const panel = document.getElementById('mon-checkpoints');
    const dialog = document.getElementById('mon-rollback');
    if (!panel || refreshing || (dialog && dialog.open) || panel.contains(document.activeElement)) return;
    refreshing = true;
    try {
      const page = new URLSearchParams(location.search).get('ckpt_page') || '';  // the page the user is on
      const url = `${cfg.checkpointsUrl}?back=${encodeURIComponent(location.pathname)}&ckpt_page=${encodeURIComponent(page)}`;
      const resp = await fetch(url, {credentials: 'same-origin'});
      if (!resp.ok) throw new Error('HTTP ' + resp.status);
      panel.innerHTML = await resp.text();  // server-rendered, autoescaped
      const count = panel.querySelector('[data-checkpoint-count]');
      const tab = document.getElementById('tab-checkpoints');
      if (count && tab) tab.textContent = `Checkpoints (${count.dataset.checkpointCount})`;
      wb.localTimes(panel);
      bindCheckpoints();
      checkpointsKey = key;
    } catch (e) { /* keep the table; the next poll tries again */ }
    refreshing = false;
  }
  // Evaluations of a finished run still move on: keep asking while one is queued or running.
  const evaluating = () => !!root.querySelector('#mon-checkpoints .state-running');

  // -- start -------------------------------------------------------------------------------------
  buildGrid();
  const wanted = tabs.find((t) => '#' + t.dataset.tab === location.hash) || tabs[0];
  if (tabs.length) showTab(wanted);
  bindCheckpoints();
  loadAll().then(loadAncestors);
  setInterval(() => { if (isActive || evaluating()) poll(); }, cfg.pollMs || 2000);
})();
