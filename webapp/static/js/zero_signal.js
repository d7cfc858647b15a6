// Quality tab, zero-signal section: follow a queued or running dry run, then reload to show its result.
(function () {
  const follow = () => window.wb.followProgress(document.getElementById('zs-run'), document.getElementById('zs-bar'),
    document.getElementById('zs-text'), (s, pct) => 'Sampling and scoring… ' + pct + '%');
  // The section's script sits in the page body: start once app.js (window.wb) has loaded.
  if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', follow);
  else follow();
})();
