// The sample browser in the run page's Samples tab: server-rendered fragments (monitoring/_samples.html);
// its links and forms load the next fragment in place. Without JavaScript they are plain pages.
(function () {
  const box = document.getElementById('mon-samples-body');
  if (!box) return;
  let loaded = false;

  function fragmentUrl(url) {
    const u = new URL(url, location.href);
    u.searchParams.set('fragment', '1');
    return u.toString();
  }

  async function load(url) {
    loaded = true;
    box.setAttribute('aria-busy', 'true');
    try {
      const resp = await fetch(fragmentUrl(url), {credentials: 'same-origin'});
      box.innerHTML = await resp.text();  // server-rendered, autoescaped
      if (window.wb && wb.localTimes) wb.localTimes(box);
    } catch (e) {
      box.textContent = 'Could not load the samples: ' + e.message;
    }
    box.removeAttribute('aria-busy');
    const heading = box.querySelector('[data-samples-focus]');
    if (heading) heading.focus({preventScroll: true});
  }

  box.addEventListener('click', (e) => {
    const a = e.target.closest('a[data-samples-nav]');
    if (!a || e.ctrlKey || e.metaKey || e.shiftKey) return;
    e.preventDefault();
    load(a.href);
  });
  box.addEventListener('submit', (e) => {
    const form = e.target.closest('form[data-samples-form]');
    if (!form) return;
    e.preventDefault();
    const params = new URLSearchParams(new FormData(form));
    [...params.keys()].forEach((k) => { if (params.get(k) === '') params.delete(k); });
    load(form.action.split('?')[0] + '?' + params.toString());
  });
  // a changed select in a form that asks for it (the step picker) applies at once
  box.addEventListener('change', (e) => {
    const sel = e.target.closest('select[data-samples-autosubmit]');
    if (sel && sel.form) sel.form.requestSubmit();
  });

  window.wbSamples = {show() { if (!loaded) load(box.dataset.url); }, load};
})();
