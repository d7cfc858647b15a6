// Diagnostic bundles page: while a bundle is being built, refresh the table every two seconds.
(function () {
  const body = document.getElementById('bundles-body');
  if (!body) return;
  const tick = async () => {
    if (!body.querySelector('[data-building="1"]')) return;
    try {
      const r = await fetch(body.dataset.fragmentUrl, {credentials: 'same-origin'});
      if (r.ok) body.innerHTML = await r.text();
    } catch (e) { /* the next tick tries again */ }
    setTimeout(tick, 2000);
  };
  setTimeout(tick, 2000);
})();
