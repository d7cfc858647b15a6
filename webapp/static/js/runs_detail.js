// Job page: poll the log tail and status every 2 s while the job is active.
(function () {
  const box = document.getElementById('job-status');
  if (!box) return;
  const url = box.dataset.logUrl;
  const log = document.getElementById('job-log');
  const stateEl = document.getElementById('job-state');
  const stepEl = document.getElementById('job-step');
  const bar = document.getElementById('job-progress');
  const initialState = stateEl.textContent.trim();
  let active = box.dataset.active === '1';

  async function tick() {
    let data;
    try { data = await wb.get(url); } catch (err) { return; }
    const atBottom = log.scrollTop + log.clientHeight >= log.scrollHeight - 20;
    if (data.lines && data.lines.length) log.textContent = data.lines.join('\n');
    if (atBottom) log.scrollTop = log.scrollHeight;
    stateEl.textContent = data.state;
    stateEl.className = 'state state-' + data.state;
    stepEl.textContent = data.last_step;
    if (data.total_steps && bar) bar.style.width = Math.min(100, 100 * data.last_step / data.total_steps) + '%';
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
