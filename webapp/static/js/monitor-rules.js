// Health rules on the job page: each rule's state (ok / warming up / tripped) follows the live poll.
(function () {
  const LABELS = {ok: 'ok', warming_up: 'warming up', tripped: 'tripped'};
  document.addEventListener('monitor:live', (ev) => {
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
