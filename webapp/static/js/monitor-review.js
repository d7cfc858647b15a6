// The blind judging screen (every blind task: arena, human evaluation): click or press a key, the verdict is saved,
// the next pair loads. A button's data-keys ("3 t") names its keys; what was pressed is sent, never a side.
(function () {
  const box = document.getElementById('he-item');
  if (!box) return;
  const status = document.getElementById('he-status');
  let busy = false;
  async function choose(choice) {
    if (busy) return;
    busy = true;
    box.querySelectorAll('[data-choice]').forEach((b) => { b.disabled = true; });
    status.textContent = 'Saving…';
    try {
      const r = await wb.post(box.dataset.api, {pair: Number(box.dataset.pair), choice});
      const url = new URL(location.href);
      url.searchParams.delete('pair');
      if (r.next) url.searchParams.set('pair', r.next);
      location.assign(url.toString());
    } catch (e) {
      status.textContent = 'Not saved: ' + e.message;
      box.querySelectorAll('[data-choice]').forEach((b) => { b.disabled = false; });
      busy = false;
    }
  }
  box.querySelectorAll('[data-choice]').forEach((b) => b.addEventListener('click', () => choose(b.dataset.choice)));
  // The same keys as the preference review screen (webapp/review): 1 left, 2 right, N/J next, P/K previous.
  const KEYS = {};
  box.querySelectorAll('[data-keys]').forEach((b) => b.dataset.keys.split(' ').forEach((k) => { KEYS[k] = b.dataset.choice; }));
  const NAV = {n: 'next', j: 'next', p: 'prev', k: 'prev'};
  document.addEventListener('keydown', (e) => {
    if (e.altKey || e.ctrlKey || e.metaKey || /^(INPUT|TEXTAREA|SELECT)$/.test(e.target.tagName)) return;
    const key = e.key.toLowerCase();
    if (KEYS[key]) { e.preventDefault(); choose(KEYS[key]); return; }
    const link = NAV[key] && box.querySelector(`[data-nav="${NAV[key]}"]`);
    if (link) { e.preventDefault(); location.assign(link.href); }
  });
  box.dataset.ready = 'true';  // the keys are bound: a page still loading would drop a key pressed now
})();
