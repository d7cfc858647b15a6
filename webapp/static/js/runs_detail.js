// Job page: poll the log tail and status every 2 s while the job is active.
(function () {
  const box = document.getElementById('job-status');
  if (!box) return;
  const url = box.dataset.logUrl;
  const log = document.getElementById('job-log');
  const stateEl = document.getElementById('job-state');
  const stepEl = document.getElementById('job-step');
  const bar = document.getElementById('job-progress');
  const phaseEl = document.getElementById('job-phase');
  const initialState = stateEl.textContent.trim();
  let active = box.dataset.active === '1';
  let monitorAt = 0;  // when the monitor's live poll last gave the step (its charts' poll wins)

  function showStep(step, total) {
    stepEl.textContent = step;
    if (!total || !bar) return;
    const pct = Math.min(100, 100 * step / total);
    bar.style.width = pct + '%';
    bar.parentElement.setAttribute('aria-valuenow', String(Math.round(pct)));
  }
  document.addEventListener('wb:run-step', (e) => {
    monitorAt = Date.now();
    showStep(e.detail.step, Number(box.dataset.totalSteps) || 0);
  });

  // Before the first step: what the run is doing (Ray, the model, a first validation) and for how long.
  function showPhase(data) {
    if (!phaseEl) return;
    phaseEl.hidden = !data.phase;
    if (!data.phase) return;
    let text = 'Starting up: ' + data.phase;
    const since = data.phase_since ? Date.parse(data.phase_since) : NaN;
    if (!Number.isNaN(since)) {
      const s = Math.max(0, Math.round((Date.now() - since) / 1000));
      text += ' · ' + (s >= 60 ? Math.floor(s / 60) + ' min ' + (s % 60) + ' s' : s + ' s');
    }
    phaseEl.textContent = text;
  }

  async function tick() {
    let data;
    try { data = await wb.get(url); } catch (err) { return; }
    const atBottom = log.scrollTop + log.clientHeight >= log.scrollHeight - 20;
    if (data.lines && data.lines.length) log.textContent = data.lines.join('\n');
    if (atBottom) log.scrollTop = log.scrollHeight;
    stateEl.textContent = data.state;
    stateEl.className = 'state state-' + data.state;
    showPhase(data);
    const attemptState = data.attempt && document.getElementById('attempt-state-' + data.attempt);
    if (attemptState && data.attempt_state) {
      attemptState.textContent = data.attempt_state;
      attemptState.className = 'state state-' + data.attempt_state;
    }
    if (Date.now() - monitorAt > 6000) showStep(data.last_step, data.total_steps);
    if (data.state !== initialState && !data.active) {
      // The job ended: reload once so the buttons (resume, clone) and the events match its new state.
      setTimeout(() => location.reload(), 800);
      active = false;
    }
    active = data.active;
  }
  tick();
  const timer = setInterval(() => { if (active) tick(); else clearInterval(timer); }, 2000);
})();
