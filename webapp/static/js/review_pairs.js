// Bulk list: "select all on this page".
(function () {
  const all = document.getElementById('rv-all');
  if (!all) return;
  all.addEventListener('change', () => {
    document.querySelectorAll('input[name="rows"]').forEach((box) => { box.checked = all.checked; });
  });
})();
