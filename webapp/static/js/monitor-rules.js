// Run health on the job page: the stalled banner and each rule's state (ok / warming up / tripped)
// follow the live poll.
(function () {
  const LABELS = {ok: 'ok', warming_up: 'warming up', tripped: 'tripped'};
  document.addEventListener('monitor:live', (ev) => {
    const banner = document.getElementById('mon-stalled');
    const stall = ev.detail.stall || {};
    if (banner) {
      banner.hidden = !stall.stalled;
      if (stall.stalled) {
        banner.querySelector('[data-stall-text]').textContent =
          `no new step for ${Math.round(stall.idle_s)} s (limit ${Math.round(stall.limit_s)} s)`;
      }
    }
    (ev.detail.rules || []).forEach((rule) => {
      const li = document.querySelector(`#mon-rules li[data-rule="${CSS.escape(rule.name)}"]`);
      if (!li) return;
      const state = li.querySelector('[data-rule-state]');
      state.className = `mon-rule-state mon-rule-${rule.status}`;
      state.textContent = LABELS[rule.status] || rule.status;
      li.querySelector('[data-rule-trips]').textContent = rule.trips ? `· tripped ${rule.trips}×` : '';
    });
  });
})();
