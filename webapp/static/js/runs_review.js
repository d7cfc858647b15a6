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
