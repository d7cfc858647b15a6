// Quality tab: follow a queued or running report's progress, then reload to show its sections.
window.wb.followProgress(document.getElementById('report-status'), document.getElementById('report-bar'),
  document.getElementById('report-text'), (s, pct) => (s.phase || s.status) + '… ' + pct + '%');
