// The launch review, shown again (the browser's Back after Launch): if its launch token already made a job,
// say so and offer that job instead of a second Launch.
(function () {
  const form = document.getElementById('review-form');
  if (!form) return;
  function check() {
    fetch(form.dataset.launchedUrl, {headers: {Accept: 'application/json'}, cache: 'no-store'})
      .then((r) => (r.ok ? r.json() : null))
      .then((body) => {
        if (!body || !body.job) return;
        const note = document.getElementById('review-launched');
        const link = document.getElementById('review-launched-link');
        link.href = body.url;
        link.querySelector('span').textContent = body.job;
        note.hidden = false;
        document.getElementById('review-next').hidden = true;
        const launchButton = document.getElementById('review-launch');
        if (launchButton) launchButton.remove();
      })
      .catch(() => {});
  }
  window.addEventListener('pageshow', check);
})();

// The zero-signal check: redraw its card from the server until the worker has sampled and scored.
(function () {
  function poll() {
    const card = document.getElementById('prelaunch');
    if (!card || card.dataset.finished === '1') return;
    fetch(card.dataset.url, {cache: 'no-store'})
      .then((r) => (r.ok ? r.text() : null))
      .then((html) => {
        if (html) card.outerHTML = html;
        setTimeout(poll, 1500);
      })
      .catch(() => setTimeout(poll, 5000));
  }
  setTimeout(poll, 1000);
})();
