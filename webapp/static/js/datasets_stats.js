// Draw the stats page's Plotly figures (built server-side by webapp/datasets/charts.py).
(function () {
  document.querySelectorAll('[data-figure]').forEach((el) => {
    const src = document.getElementById(el.dataset.figure);
    if (!src || !window.Plotly) return;
    const fig = JSON.parse(src.textContent);
    if (!fig.data.length) { el.innerHTML = '<p class="empty">No data for this chart.</p>'; return; }
    window.Plotly.newPlot(el, fig.data, fig.layout, {responsive: true, displaylogo: false});
  });
})();
