// Small shared helpers: CSRF-aware fetch, local time rendering. No framework, no CDN.
(function () {
  function cookie(name) {
    const m = document.cookie.match('(^|;)\\s*' + name + '\\s*=\\s*([^;]+)');
    return m ? decodeURIComponent(m.pop()) : '';
  }
  window.wb = {
    csrf: () => cookie('csrftoken'),
    // "1 pair", "2 pairs": a count with its noun in the right number (`plural` for an irregular noun).
    count: (n, noun, plural) => `${n} ${Number(n) === 1 ? noun : (plural || noun + 's')}`,
    async post(url, data) {
      const resp = await fetch(url, {
        method: 'POST', credentials: 'same-origin',
        headers: {'Content-Type': 'application/json', 'X-CSRFToken': cookie('csrftoken')},
        body: JSON.stringify(data || {}),
      });
      const body = await resp.json().catch(() => ({}));
      if (!resp.ok) { const err = new Error(body.detail || ('HTTP ' + resp.status)); err.body = body; err.status = resp.status; throw err; }
      return body;
    },
    async get(url) {
      const resp = await fetch(url, {credentials: 'same-origin', headers: {'Accept': 'application/json'}});
      if (!resp.ok) throw new Error('HTTP ' + resp.status);
      return resp.json();
    },
    followProgress(box, bar, text, words) {
      // Poll a queued or running task's status URL (box.dataset.statusUrl), draw its progress bar and
      // words, and reload the page once it has finished. `words(status, pct)` says what it is doing.
      if (!box || box.dataset.finished === '1') return;
      const tick = async () => {
        try {
          const s = await window.wb.get(box.dataset.statusUrl);
          const pct = Math.max(0, Math.min(100, Math.round(s.progress * 100)));
          if (bar) {
            bar.querySelector('span').style.width = pct + '%';
            bar.setAttribute('aria-valuenow', String(pct));
          }
          if (text) text.textContent = s.status === 'queued' ? 'Waiting for a worker…' : words(s, pct);
          if (s.finished) { location.reload(); return; }
        } catch (err) {
          if (text) text.textContent = 'Could not read the progress (' + err.message + '); retrying…';
        }
        setTimeout(tick, 700);
      };
      tick();
    },
    localTimes(root) {
      // Times are rendered server-side in UTC; show them in the user's own timezone.
      (root || document).querySelectorAll('time[datetime]').forEach((el) => {
        const d = new Date(el.getAttribute('datetime'));
        if (!isNaN(d)) { el.title = el.getAttribute('datetime'); el.textContent = d.toLocaleString(); }
      });
    },
  };
  document.addEventListener('DOMContentLoaded', () => window.wb.localTimes());

  // Behaviour pages ask for with data- attributes: the Content-Security-Policy forbids inline handlers.
  document.addEventListener('submit', (ev) => {
    const form = ev.target;
    if (form.dataset.confirm !== undefined && !window.confirm(form.dataset.confirm)) ev.preventDefault();
    if (form.dataset.navigate !== undefined) {  // a select whose value names the page to open
      ev.preventDefault();
      const value = form.elements[form.dataset.navigate].value;
      if (value) location.href = (form.dataset.prefix || '') + value + (form.dataset.suffix || '');
    }
  });
  document.addEventListener('change', (ev) => {
    const el = ev.target;
    if (!el.form) return;
    if (el.hasAttribute('data-autosubmit')) el.form.submit();
    if (el.hasAttribute('data-navigate-on-change')) el.form.requestSubmit();
  });
  // A page that shows something once (a secret, a sign-up link) answers a POST: make its history entry a plain
  // GET, so that reloading it or coming back to it does not post the form again.
  if (document.querySelector('[data-shown-once]') && window.history.replaceState) {
    window.history.replaceState(null, '', location.href);
  }
  document.querySelectorAll('[data-json-pretty]').forEach((view) => {
    const src = document.getElementById(view.getAttribute('data-json-pretty'));
    if (src) view.textContent = JSON.stringify(JSON.parse(src.textContent), null, 2);
  });
})();
