// Dataset upload: drag and drop, an upload progress bar (XHR upload events) and an ingest progress
// bar that polls the import's JSON status. Without JavaScript the form posts normally.
(function () {
  function setBar(bar, fraction, text, textEl) {
    const pct = Math.max(0, Math.min(100, Math.round(fraction * 100)));
    bar.querySelector('span').style.width = pct + '%';
    bar.setAttribute('aria-valuenow', String(pct));
    if (textEl) textEl.textContent = text;
  }

  function poll(statusUrl, bar, textEl, done) {
    let stopped = false;
    async function tick() {
      if (stopped) return;
      try {
        const s = await window.wb.get(statusUrl);
        const label = s.status === 'queued' ? 'Waiting for a worker…' : (s.phase || s.status) + '… ' + Math.round(s.progress * 100) + '%';
        setBar(bar, s.progress, label, textEl);
        if (s.finished || s.status === 'needs_mapping') { stopped = true; done(s); return; }
      } catch (err) {
        textEl.textContent = 'Could not read the progress (' + err.message + '); retrying…';
      }
      setTimeout(tick, 700);
    }
    tick();
  }

  function finish(s) {
    if (s.status === 'succeeded' && s.version_url) location.href = s.version_url;
    else location.href = s.url;
  }

  // The import page: follow a queued or running import, then show its outcome.
  const watch = document.getElementById('ingest-watch');
  if (watch) {
    poll(watch.dataset.statusUrl, document.getElementById('ingest-bar'), document.getElementById('ingest-text'),
         function (s) { if (s.status === 'succeeded' && s.version_url) location.href = s.version_url; else location.reload(); });
  }

  const form = document.getElementById('upload-form');
  if (!form) return;
  const input = form.querySelector('input[type=file]');
  const zone = document.getElementById('dropzone');
  const fileLabel = document.getElementById('dropzone-file');
  const errorBox = document.getElementById('upload-error');
  const maxBytes = Number(form.dataset.maxMb) * 1024 * 1024;

  // Before the upload: say whether the name creates a dataset or adds version N to an existing one.
  const nameInput = form.querySelector('input[name=name]');
  const targetsEl = document.getElementById('upload-targets');
  let targets = {};
  try { targets = JSON.parse(targetsEl ? targetsEl.textContent : '{}') || {}; } catch (err) { targets = {}; }
  const note = document.getElementById('name-note');
  const noteText = document.getElementById('name-note-text');
  const fresh = document.getElementById('name-fresh');
  const KINDS = {preference: 'preference pairs', prompts: 'verifiable prompts'};
  if (nameInput && note) nameInput.closest('.field').appendChild(note);

  function freeName(base) {
    for (let i = 2; ; i++) { const candidate = base + '-' + i; if (!targets[candidate]) return candidate; }
  }

  function showNameNote() {
    if (!nameInput || !note) return;
    const name = nameInput.value.trim();
    note.hidden = !name;
    const t = Object.prototype.hasOwnProperty.call(targets, name) ? targets[name] : null;
    note.classList.toggle('existing', !!t);
    if (!t) {
      noteText.textContent = name ? 'New name: this upload creates the dataset “' + name + '”.' : '';
      fresh.hidden = true;
      return;
    }
    noteText.textContent = 'A dataset named “' + name + '” already exists (' + (KINDS[t.kind] || t.kind) +
      '): this upload will add version ' + t.next + ' to it.';
    fresh.dataset.name = freeName(name);
    fresh.textContent = 'Use a new name instead: ' + fresh.dataset.name;
    fresh.hidden = false;
  }
  if (nameInput) nameInput.addEventListener('input', showNameNote);
  if (fresh) fresh.addEventListener('click', () => { nameInput.value = fresh.dataset.name; showNameNote(); nameInput.focus(); });
  showNameNote();

  function showFile() {
    const f = input.files[0];
    fileLabel.textContent = f ? f.name + ' (' + (f.size / 1024 / 1024).toFixed(1) + ' MB)' : '';
    if (f && nameInput && !nameInput.value) nameInput.value = f.name.replace(/\.(jsonl|ndjson|json|csv|tsv|parquet|pq)$/i, '');
    showNameNote();
  }
  input.addEventListener('change', showFile);
  ['dragenter', 'dragover'].forEach((ev) => form.addEventListener(ev, (e) => { e.preventDefault(); zone.classList.add('dragging'); }));
  ['dragleave', 'drop'].forEach((ev) => form.addEventListener(ev, (e) => { e.preventDefault(); zone.classList.remove('dragging'); }));
  form.addEventListener('drop', (e) => {
    if (!e.dataTransfer || !e.dataTransfer.files.length) return;
    const dt = new DataTransfer();
    dt.items.add(e.dataTransfer.files[0]);
    input.files = dt.files;
    showFile();
  });

  function fieldError(name, message) {
    const field = form.querySelector('[name=' + name + ']');
    errorBox.textContent = message;
    if (field) { field.setAttribute('aria-invalid', 'true'); field.focus(); }
  }

  form.addEventListener('submit', (e) => {
    e.preventDefault();
    errorBox.textContent = '';
    form.querySelectorAll('[aria-invalid]').forEach((el) => el.removeAttribute('aria-invalid'));
    const f = input.files[0];
    if (!f) { fieldError('file', 'Choose a file to upload (or drop one on the form).'); return; }
    if (f.size > maxBytes) { fieldError('file', 'The file is over the ' + form.dataset.maxMb + ' MB upload limit.'); return; }
    const data = new FormData(form);
    data.delete('csrfmiddlewaretoken');
    const submit = document.getElementById('upload-submit');
    submit.disabled = true;
    const upBox = document.getElementById('upload-progress');
    const upBar = document.getElementById('upload-bar');
    const upText = document.getElementById('upload-text');
    upBox.hidden = false;
    const xhr = new XMLHttpRequest();
    xhr.open('POST', form.dataset.api);
    xhr.setRequestHeader('X-CSRFToken', window.wb.csrf());
    xhr.setRequestHeader('Accept', 'application/json');
    xhr.upload.onprogress = (ev) => {
      if (ev.lengthComputable) setBar(upBar, ev.loaded / ev.total, (ev.loaded / 1024 / 1024).toFixed(1) + ' of ' + (ev.total / 1024 / 1024).toFixed(1) + ' MB', upText);
    };
    xhr.upload.onload = () => setBar(upBar, 1, 'Uploaded; checking the file…', upText);
    xhr.onerror = () => { submit.disabled = false; errorBox.textContent = 'The upload failed (network error). Try again.'; };
    xhr.onload = () => {
      let body = {};
      try { body = JSON.parse(xhr.responseText); } catch (err) { body = {detail: 'HTTP ' + xhr.status}; }
      const s = body.status;
      if (xhr.status === 201 && s) { finish(s); return; }
      if (xhr.status === 202 && s) {
        const inBox = document.getElementById('ingest-progress');
        inBox.hidden = false;
        poll(s.status_url, document.getElementById('ingest-bar'), document.getElementById('ingest-text'), finish);
        return;
      }
      if (s && s.url) { location.href = s.url; return; }  // needs a mapping, or failed with a report
      submit.disabled = false;
      fieldError(body.field || 'file', body.detail || ('HTTP ' + xhr.status));
    };
    xhr.send(data);
  });
})();
