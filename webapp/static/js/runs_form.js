// Launch form: fill settings from presets, show the fields that apply, live preview of config + command.
(function () {
  const form = document.getElementById('job-form');
  if (!form) return;
  document.documentElement.classList.add('js');
  const presets = JSON.parse(document.getElementById('presets-data').textContent);
  const presetBackends = JSON.parse(document.getElementById('preset-backends').textContent);
  const $ = (name) => form.elements.namedItem(name);

  function fillFromPreset() {
    const values = (presets[$('preset').value] || {})[$('kind').value];
    if (!values) return;
    Object.entries(values).forEach(([name, value]) => {
      const el = $(name);
      if (!el) return;
      if (el.type === 'checkbox') el.checked = !!value; else el.value = value === null ? '' : value;
    });
  }

  function applyVisibility() {
    const kind = $('kind').value, backend = $('backend').value;
    form.querySelectorAll('.field[data-kinds], .card[data-kinds], p[data-kinds]').forEach((el) => {
      el.toggleAttribute('data-hidden-by-kind', !el.dataset.kinds.split(' ').includes(kind));
      el.toggleAttribute('data-hidden-by-backend', !el.dataset.backends.split(' ').includes(backend));
    });
    form.querySelectorAll('.settings-group').forEach((group) => {
      const visible = [...group.querySelectorAll('.field')].some((f) => !f.hasAttribute('data-hidden-by-kind') && !f.hasAttribute('data-hidden-by-backend'));
      group.hidden = !visible;
    });
    const teacher = $('teacher_model');
    if (teacher) teacher.closest('.field').toggleAttribute('data-hidden-by-kind', kind !== 'distill');
  }

  const status = document.getElementById('preview-status');
  const yaml = document.getElementById('preview-yaml');
  const command = document.getElementById('preview-command');
  const warnings = document.getElementById('preview-warnings');
  const dataLine = document.getElementById('preview-data');

  function clearJsMessages() {
    form.querySelectorAll('.js-error').forEach((el) => el.remove());
    // the server's errors from the last submit: the live check below shows again those that still hold
    form.querySelectorAll('.field > .field-error').forEach((el) => { el.hidden = true; });
    form.querySelectorAll('.field-warning').forEach((el) => { el.hidden = true; el.textContent = ''; });
    warnings.replaceChildren();
  }

  function showFieldMessage(name, text, cls) {
    const el = form.querySelector('#id_' + CSS.escape(name));
    const field = el && el.closest('.field');
    if (cls === 'warning') {
      const w = form.querySelector('#id_' + CSS.escape(name) + '-warning');
      if (w) { w.textContent = text; w.hidden = false; }
      const li = document.createElement('li'); li.textContent = text; warnings.append(li);
      return;
    }
    const same = field && [...field.querySelectorAll(':scope > .field-error')].find((e) => e.textContent === text);
    if (same) { same.hidden = false; return; }
    const p = document.createElement('p');
    p.className = 'field-error js-error'; p.setAttribute('role', 'alert'); p.textContent = text;
    if (field) field.append(p); else warnings.append(Object.assign(document.createElement('li'), {textContent: text, className: 'field-error js-error'}));
  }

  // The preset was made for another model: say which of its settings still apply, offer those that fit.
  const fitBox = document.getElementById('model-fit');
  let fit = null;
  function showModelFit(f) {
    fit = f;
    fitBox.hidden = !f;
    if (!f) return;
    const size = f.parameters ? ` has ${(f.parameters / 1e6).toFixed(f.parameters < 1e7 ? 2 : 0)}M parameters` : '';
    const ctx = f.context ? ` and a context of ${wb.count(f.context.toLocaleString('en-US'), 'token')}` : '';
    let text = `${f.model}${size}${ctx}.`;
    if (f.fits === false) text = `The preset ${f.preset} was made for ${f.made_for}; ` + text;
    if (f.too_long) text += ` The max sequence length ${f.max_seq_len} is longer than its context.`;
    if (f.settings.length) text += ' These settings are still the preset\'s:';
    document.getElementById('model-fit-text').textContent = text;
    const table = document.getElementById('model-fit-settings');
    table.hidden = !f.settings.length;
    document.getElementById('model-fit-suggested-head').textContent = f.suggested ? `${f.suggested}` : 'Fits the model';
    table.tBodies[0].replaceChildren(...f.settings.map((r) => {
      const tr = document.createElement('tr');
      [r.label, r.value === null ? '—' : String(r.value), r.suggested === null || r.suggested === undefined ? '—' : String(r.suggested)]
        .forEach((t, i) => { const td = document.createElement(i ? 'td' : 'th'); if (!i) td.scope = 'row'; td.textContent = t; tr.append(td); });
      return tr;
    }));
    const apply = document.getElementById('model-fit-apply');
    apply.hidden = !f.suggested;
    apply.textContent = f.suggested ? `Use ${f.suggested}'s settings` : '';
    document.getElementById('model-fit-lengths').hidden = !f.lengths;
  }
  document.getElementById('model-fit-apply').addEventListener('click', () => {
    if (!fit || !fit.suggested) return;
    $('preset').value = fit.suggested;
    $('preset').dispatchEvent(new Event('change', {bubbles: true}));
  });
  document.getElementById('model-fit-lengths').addEventListener('click', () => {
    if (!fit || !fit.lengths) return;
    Object.entries(fit.lengths).forEach(([name, value]) => { $(name).value = value; });
    schedule();
  });

  let timer = null, seq = 0;
  async function preview() {
    const mine = ++seq;
    const body = new FormData(form);
    body.set('action', 'preview');
    status.textContent = 'Checking…';
    try {
      const resp = await fetch(form.dataset.previewUrl, {method: 'POST', body, credentials: 'same-origin',
        headers: {'X-CSRFToken': wb.csrf(), 'Accept': 'application/json'}});
      const data = await resp.json();
      if (mine !== seq) return;  // a newer preview is on its way
      clearJsMessages();
      showModelFit(data.model_fit || null);
      Object.entries(data.errors || {}).forEach(([name, msgs]) => msgs.forEach((m) => showFieldMessage(name === '__all__' ? '' : name, m, 'error')));
      Object.entries(data.warnings || {}).forEach(([name, m]) => showFieldMessage(name, m, 'warning'));
      const nErr = Object.values(data.errors || {}).reduce((a, m) => a + m.length, 0);
      status.textContent = data.ok ? 'Ready to launch.' : `${nErr} problem${nErr === 1 ? '' : 's'} to fix before launch.`;
      yaml.textContent = data.yaml || '';
      command.textContent = data.command || '';
      const c = data.counts;
      const l = data.lengths;
      const over = l ? ` Prompts longer than the max prompt length ${l.max_prompt_length}: ${l.over} of ${l.rows}` +
        ` (${(100 * l.share).toFixed(1)}%), longest ${l.max} ${l.unit}.` : '';
      dataLine.textContent = c ? `${wb.count(c.included, 'row')} (${c.train} train, ${c.val} validation); ${c.excluded} excluded.${over}` : '—';
    } catch (err) {
      status.textContent = 'Preview unavailable: ' + err.message;
    }
  }
  function schedule() { clearTimeout(timer); timer = setTimeout(preview, 600); }

  $('preset').addEventListener('change', () => {
    if (presetBackends[$('preset').value]) $('backend').value = presetBackends[$('preset').value];
    fillFromPreset(); applyVisibility();
  });
  $('kind').addEventListener('change', () => { fillFromPreset(); applyVisibility(); });
  $('backend').addEventListener('change', applyVisibility);
  form.addEventListener('input', schedule);
  form.addEventListener('change', schedule);
  applyVisibility();
  schedule();
})();
