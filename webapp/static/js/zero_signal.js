// Quality tab, zero-signal section: follow a queued or running dry run, then reload to show its result.
(function () {
  const box = document.getElementById('zs-run');
  if (!box || box.dataset.finished === '1') return;
  const bar = document.getElementById('zs-bar');
  const text = document.getElementById('zs-text');
  async function tick() {
    try {
      const s = await window.wb.get(box.dataset.statusUrl);
      const pct = Math.max(0, Math.min(100, Math.round(s.progress * 100)));
      if (bar) {
        bar.querySelector('span').style.width = pct + '%';
        bar.setAttribute('aria-valuenow', String(pct));
      }
      if (text) text.textContent = s.status === 'queued' ? 'Waiting for a worker…' : 'Sampling and scoring… ' + pct + '%';
      if (s.finished) { location.reload(); return; }
    } catch (err) {
      if (text) text.textContent = 'Could not read the progress (' + err.message + '); retrying…';
    }
    setTimeout(tick, 700);
  }
  // The section's script sits in the page body: start once app.js (window.wb) has loaded.
  if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', tick);
  else tick();
})();
