// Shared chart helpers for the monitoring pages (job panel, compare). Plotly is served locally.
(function () {
  const COLORS = ['#2457d6', '#d6452a', '#1a9a5a', '#9a56d6', '#c98a00', '#0f8fa8', '#d64796', '#5b6470'];
  const EVENT_STYLE = {
    checkpoint: {color: '#8a94a3', symbol: 'triangle-down', dash: 'dot', label: 'checkpoint'},
    rollback: {color: '#c2410c', symbol: 'star', dash: 'dash', label: 'rollback'},
    guard_rule: {color: '#b42318', symbol: 'x-thin-open', dash: 'solid', label: 'health rule'},
    promote: {color: '#137333', symbol: 'diamond', dash: 'dash', label: 'promoted'},
    resume: {color: '#9a6700', symbol: 'triangle-right', dash: 'dash', label: 'resume'},
  };

  // Debiased EMA (TensorBoard's smoothing): early points are not dragged towards 0.
  function ema(values, weight) {
    if (!weight) return values.slice();
    const out = new Array(values.length);
    let last = 0, n = 0;
    for (let i = 0; i < values.length; i++) {
      const v = values[i];
      if (v === null || !isFinite(v)) { out[i] = null; continue; }
      last = last * weight + (1 - weight) * v;
      n += 1;
      out[i] = last / (1 - Math.pow(weight, n));
    }
    return out;
  }

  function rgba(hex, alpha) {
    const n = parseInt(hex.slice(1), 16);
    return `rgba(${(n >> 16) & 255},${(n >> 8) & 255},${n & 255},${alpha})`;
  }

  // x values of a series for the chosen axis: step, wall time (dates) or hours since `t0`.
  function xOf(series, mode, t0) {
    if (mode === 'time') return series.time.map((t) => (t === null ? null : new Date(t * 1000)));
    if (mode === 'relative') return series.time.map((t) => (t === null ? null : (t - t0) / 3600));
    return series.step;
  }

  function xTitle(mode) {
    return mode === 'time' ? 'wall time' : mode === 'relative' ? 'hours since start' : 'step';
  }

  // x of an event (step, or its creation time).
  function eventX(ev, mode, t0) {
    if (mode === 'time') return new Date(ev.ts * 1000);
    if (mode === 'relative') return (ev.ts - t0) / 3600;
    return ev.step;
  }

  // Vertical lines (shapes) and a hoverable marker row (on a hidden 0..1 axis) for run events.
  function eventDecorations(events, mode, t0) {
    const shapes = [];
    const byKind = {};
    events.forEach((ev) => {
      const style = EVENT_STYLE[ev.kind];
      if (!style || (mode === 'step' && (ev.step === null || ev.step === undefined))) return;
      const x = eventX(ev, mode, t0);
      shapes.push({type: 'line', xref: 'x', yref: 'paper', x0: x, x1: x, y0: 0, y1: 1,
                   line: {color: style.color, width: 1, dash: style.dash}, layer: 'below'});
      (byKind[ev.kind] = byKind[ev.kind] || []).push({x, text: `${style.label}${ev.step !== null ? ' @ step ' + ev.step : ''}: ${ev.message}`});
    });
    const traces = Object.entries(byKind).map(([kind, pts]) => ({
      type: 'scatter', mode: 'markers', yaxis: 'y2', x: pts.map((p) => p.x), y: pts.map(() => 0.97),
      text: pts.map((p) => p.text), hovertemplate: '%{text}<extra></extra>', name: EVENT_STYLE[kind].label,
      marker: {symbol: EVENT_STYLE[kind].symbol, size: 9, color: EVENT_STYLE[kind].color},
      showlegend: false, cliponaxis: false,
    }));
    return {shapes, traces};
  }

  // The legend sits in its own strip under the x axis title, placed in pixels (however many lines the ticks
  // take: dates take two), so it never covers the title.
  const LEGEND_STRIP = 30;
  function baseLayout(title, opts) {
    const axis = opts.xmode === 'time' ? 66 : 50;  // tick labels and the axis title under the plot
    const height = (opts.height || 270) + LEGEND_STRIP, top = 34, bottom = axis + LEGEND_STRIP;
    return {
      title: {text: title, font: {size: 14}, x: 0.01, xanchor: 'left'},
      margin: {l: 56, r: 12, t: top, b: bottom}, height,
      xaxis: {title: {text: xTitle(opts.xmode), font: {size: 11}}, type: opts.xmode === 'time' ? 'date' : 'linear',
              zeroline: false},
      yaxis: {type: opts.log ? 'log' : 'linear', zeroline: false, tickformat: opts.unit === 'rate' ? '.0%' : undefined,
              exponentformat: 'e'},
      yaxis2: {overlaying: 'y', range: [0, 1], visible: false, fixedrange: true},
      hovermode: 'x unified', showlegend: true,
      legend: {orientation: 'h', x: 0, xanchor: 'left', y: -axis / (height - top - bottom), yanchor: 'top',
               font: {size: 11}},
      uirevision: `${opts.xmode}|${opts.log}`,
      paper_bgcolor: '#fff', plot_bgcolor: '#fff',
    };
  }

  // A y axis that reads well where Plotly's autorange does not: a fraction on 0–1 (not −100 %…100 % around a
  // constant 0), and a constant series (a fixed learning rate) centred on its value with a few readable ticks.
  // null: autorange is fine.
  function yAxisFor(values, unit) {
    let lo = Infinity, hi = -Infinity;
    values.forEach((v) => { if (v !== null && isFinite(v)) { lo = Math.min(lo, v); hi = Math.max(hi, v); } });
    if (lo === Infinity) return null;
    if (unit === 'rate' && lo >= 0 && hi <= 1) return {range: [-0.02, 1.02], autorange: false, dtick: 0.2};
    const scale = Math.max(Math.abs(lo), Math.abs(hi));
    if (hi - lo <= scale * 1e-9) {
      const pad = scale ? scale * 0.5 : 1;
      return {range: [lo - pad, hi + pad], autorange: false, tickformat: '.3~g', nticks: 5};
    }
    return null;
  }

  // -- win rates: wins / ties / losses beside the rate, and "too few samples" in words ------------------
  // {step: value} of a series, to line counts up with the rate's steps.
  function byStep(series) {
    const m = new Map();
    series.step.forEach((st, j) => m.set(st, series.value[j]));
    return m;
  }
  // Hover text per point of a win-rate series: "W 1 · T 3 · L 0 of 4".
  function partsText(rate, get, s) {
    const w = byStep(get(s.parts.wins)), t = byStep(get(s.parts.ties)), l = byStep(get(s.parts.losses));
    const n = s.count ? byStep(get(s.count)) : new Map();
    return rate.step.map((st) => (w.has(st) ? `W ${w.get(st)} · T ${t.get(st)} · L ${l.get(st)} of ${n.get(st)}`
      : (n.has(st) ? `n=${n.get(st)}` : 'n=?')));
  }
  // Dotted lines of the share of wins and of ties (of the judged pairs) under each win rate.
  function shareTraces(chart, get, xmode, t0) {
    const traces = [];
    chart.series.forEach((s, i) => {
      if (!s.parts || !s.count) return;
      const n = byStep(get(s.count));
      [['wins', 'dot'], ['ties', 'dashdot']].forEach(([part, dash]) => {
        const d = get(s.parts[part]);
        if (!d.step.length) return;
        const y = d.step.map((st, j) => (n.get(st) ? d.value[j] / n.get(st) : null));
        traces.push({type: 'scatter', mode: d.step.length < 3 ? 'lines+markers' : 'lines', x: xOf(d, xmode, t0), y,
                     name: `${part} (share of ${s.label})`, line: {color: COLORS[i % COLORS.length], width: 1, dash},
                     hovertemplate: `%{y:.0%}<extra>${part}</extra>`});
      });
    });
    return traces;
  }
  // The sentence under a win-rate chart when its latest interval is too wide (the rule of training/winrate.py).
  function precisionNote(n, lo, hi, wide) {
    if (!n) return 'No judged pairs yet.';
    const wideNow = n < wide.n || (lo !== undefined && hi !== undefined && (hi - lo) / 2 > wide.half_width);
    if (!wideNow) return '';
    const pct = (v) => `${Math.round(v * 100)}%`;
    const few = (n < wide.n ? 'only ' : '') + window.wb.count(n, 'judged pair');
    const span = lo !== undefined && hi !== undefined ? `; the true rate could be anywhere from ${pct(lo)} to ${pct(hi)}` : '';
    return `Too few samples to trust this rate: ${few}${span}.`;
  }
  // The chart's note: its rule, then for each win rate the latest point's wins / ties / losses and precision.
  function chartNote(chart, get) {
    const parts = [chart.note];
    chart.series.forEach((s) => {
      if (!s.parts || !s.band) return;
      const rate = get(s.name);
      if (!rate.step.length) return;
      const last = rate.step[rate.step.length - 1];
      const at = (name) => byStep(get(name)).get(last);
      const n = at(s.count);
      const text = partsText({step: [last]}, get, s)[0];
      const note = precisionNote(n, at(s.band[0]), at(s.band[1]), chart.wide);
      parts.push(`Latest ${s.label} (step ${last}): ${Math.round(rate.value[rate.value.length - 1] * 1000) / 10}% (${text}).${note ? ' ' + note : ''}`);
    });
    return parts.join(' ');
  }

  const PLOT_CONFIG = {responsive: true, displaylogo: false, modeBarButtonsToRemove: ['select2d', 'lasso2d']};

  window.wbCharts = {COLORS, EVENT_STYLE, ema, rgba, xOf, xTitle, eventX, eventDecorations, baseLayout, yAxisFor,
                    PLOT_CONFIG, partsText, shareTraces, precisionNote, chartNote};
})();
