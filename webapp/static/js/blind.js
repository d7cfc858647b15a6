// A blind task's page: follow the generation of both sides and the automatic judges live, then reload to show them
// (window.wb.followProgress, as every progress in the app).
(function () {
  const follow = () => {
    window.wb.followProgress(document.getElementById('blind-progress'), document.getElementById('blind-progress-bar'),
      document.getElementById('blind-progress-text'), (s, pct) => 'Generating both sides: ' + pct + '%');
    const judges = document.getElementById('judges-live');
    window.wb.followProgress(judges, null, document.getElementById('judges-live-text'), (s) => s.words);
  };
  if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', follow);
  else follow();
})();
