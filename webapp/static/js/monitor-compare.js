// Compare runs: one metric of several runs overlaid, with the job page's smoothing / x-axis / log controls.
(function () {
  const cfgEl = document.getElementById('compare-config');
  const div = document.getElementById('compare-chart');
  if (!cfgEl || !div || !window.Plotly) return;
  const cfg = JSON.parse(cfgEl.textContent);
  const C = window.wbCharts;
  const settings = Object.assign({smoothing: 0.6, xmode: 'step', log: false},
    JSON.parse(localStorage.getItem('wb.monitor.settings') || '{}'));
  let runs = [];

  function status(text, err) {
    const el = document.getElementById('mon-status');
    el.textContent = text; el.classList.toggle('field-error', !!err);
  }

  function render() {
    const w = Number(settings.smoothing) || 0;
    const traces = [];
    runs.forEach((run, i) => {
      const color = C.COLORS[i % C.COLORS.length];
      const t0 = run.time.find((t) => t !== null) || 0;  // relative time: each run from its own start
      const x = C.xOf(run, settings.xmode, t0);
      traces.push({type: 'scatter', mode: 'lines', x, y: run.value, name: w ? `${run.label} (raw)` : run.label,
                   opacity: w ? 0.25 : 1, line: {color, width: 1}, showlegend: !w,
                   hovertemplate: `%{y:.6g}<extra>${w ? 'raw ' : ''}${run.label}</extra>`});
      if (w) traces.push({type: 'scatter', mode: 'lines', x, y: C.ema(run.value, w), name: run.label,
                          line: {color, width: 2}, hovertemplate: `%{y:.4g}<extra>${run.label}</extra>`});
    });
    const layout = C.baseLayout(cfg.name, {xmode: settings.xmode, log: settings.log, height: 460});
    if (!settings.log) Object.assign(layout.yaxis, C.yAxisFor([].concat(...runs.map((r) => r.value)), '') || {});
    Plotly.react(div, traces, layout, C.PLOT_CONFIG);
  }

  async function load() {
    const q = new URLSearchParams({name: cfg.name, jobs: cfg.jobs.join(',')});
    try {
      runs = (await wb.get(cfg.api + '?' + q.toString())).runs;
      const empty = runs.filter((r) => !r.step.length).map((r) => r.label);
      status(empty.length ? `No ${cfg.name} in: ${empty.join(', ')}` : '');
      render();
    } catch (e) { status('Could not load the runs: ' + e.message, true); }
  }

  const smooth = document.getElementById('mon-smoothing'), out = document.getElementById('mon-smoothing-value');
  smooth.value = settings.smoothing; out.textContent = Number(settings.smoothing).toFixed(2);
  smooth.addEventListener('input', () => { settings.smoothing = Number(smooth.value); out.textContent = settings.smoothing.toFixed(2); render(); });
  const xsel = document.getElementById('mon-xaxis');
  xsel.value = settings.xmode;
  xsel.addEventListener('change', () => { settings.xmode = xsel.value; render(); });
  const logBox = document.getElementById('mon-log');
  logBox.checked = !!settings.log;
  logBox.addEventListener('change', () => { settings.log = logBox.checked; render(); });
  load();
})();
