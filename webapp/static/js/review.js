// The review screen: loads pairs from the review API, one keystroke per decision, no page reloads.
// HTML of prompts and responses is sanitised on the server (bleach); everything else goes in as text.
(function () {
  const root = document.getElementById('review-app');
  if (!root) return;
  const api = root.dataset.api;
  const $ = (id) => document.getElementById(id);
  const LABEL_TEXT = {approve: 'approve (as labelled)', swap: 'swap (rejected is better)', reject: 'reject', flag: 'flag'};
  let item = null;
  let shownAt = performance.now();
  let busy = false;
  let labelsShown = false;
  let dialogSubmit = null;

  function setStatus(msg, isError) {
    const el = $('rv-status');
    el.textContent = msg || '';
    el.classList.toggle('error', !!isError);
  }

  async function getJSON(url) {
    const resp = await fetch(url, {credentials: 'same-origin', headers: {Accept: 'application/json'}});
    const body = await resp.json().catch(() => ({}));
    if (!resp.ok) throw new Error(body.detail || ('HTTP ' + resp.status));
    return body;
  }

  function renderProgress(p) {
    if (!p) return;
    // your queue: what you may still decide (exact with one reviewer per pair, an upper bound above that)
    const left = p.left === 0 ? 'nothing left for you' : (p.left_exact ? '' : 'up to ') + p.left + ' left for you';
    $('rv-progress').textContent = p.done + ' done · ' + left;
    $('rv-dataset').textContent = 'Dataset: ' + p.decided + ' of ' + p.total + ' pair' + (p.total === 1 ? '' : 's') +
      ' decided · ' + p.conflicts + ' conflict' + (p.conflicts === 1 ? '' : 's') + ' · ' + p.flagged + ' flagged';
    // The bar is the dataset's share of decided pairs, drawn beside the words that say so (your own count is
    // separate: with overlap 2 your decisions are not final ones yet).
    const pct = p.total ? Math.min(100, 100 * p.decided / p.total) : 0;
    $('rv-bar').style.width = pct.toFixed(1) + '%';
    $('rv-bar-box').setAttribute('aria-valuenow', String(Math.round(pct)));
  }

  function renderPane(name, pane) {
    $('rv-' + name).innerHTML = pane.html;  // server-sanitised
    $('rv-' + name).scrollTop = 0;
    const tag = $('rv-' + name + '-tag');
    tag.textContent = 'dataset: ' + pane.side;
    tag.className = 'rv-tag ' + pane.side;
    tag.hidden = !labelsShown;
    const rev = $('rv-' + name + '-rev');
    rev.textContent = pane.revision ? 'edited (revision ' + pane.revision + ')' : '';
    rev.hidden = !pane.revision;
  }

  function describe(review) {
    let text = LABEL_TEXT[review.label] || review.label;
    if (review.choice) text += ' (picked ' + review.choice + ')';
    if (review.reason) text += ': ' + review.reason;
    return text;
  }

  function render(body) {
    renderProgress(body.progress);
    item = body.item;
    if (!item) {
      $('rv-item').hidden = true;
      $('rv-empty').hidden = false;
      $('rv-empty-msg').textContent = body.message || 'Nothing to review.';
      return;
    }
    $('rv-empty').hidden = true;
    $('rv-item').hidden = false;
    $('rv-index').textContent = item.index;
    $('rv-source').textContent = item.data_source || '(no source)';
    $('rv-split').textContent = item.split;
    $('rv-state').textContent = item.state ? '· state: ' + item.state.state : '';
    $('rv-prompt').innerHTML = item.prompt_html;  // server-sanitised
    $('rv-prompt').scrollTop = 0;
    renderPane('left', item.left);
    renderPane('right', item.right);
    $('rv-mine').textContent = item.my_review ? 'Your decision: ' + describe(item.my_review)
      : (item.assigned ? 'Not decided yet.' : 'Not assigned to you: deciding claims it if a reviewer slot is free.');
    const others = $('rv-others');
    others.replaceChildren();
    if (item.reviews && item.reviews.length) {
      const h = document.createElement('h2'); h.textContent = 'Decisions so far'; others.append(h);
      const ul = document.createElement('ul'); ul.className = 'list';
      item.reviews.forEach((r) => { const li = document.createElement('li'); li.textContent = r.reviewer + ': ' + describe(r); ul.append(li); });
      others.append(ul);
    }
    const comments = $('rv-comments');
    comments.replaceChildren();
    if (!item.comments.length) {
      const li = document.createElement('li'); li.className = 'empty'; li.textContent = 'No comments. Press C to add one.'; comments.append(li);
    }
    item.comments.forEach((c) => { const li = document.createElement('li'); li.textContent = c.author + ': ' + c.text; comments.append(li); });
    shownAt = performance.now();
    history.replaceState(null, '', '?row=' + item.row_id);
  }

  async function load(url, keepOnEmpty, silent) {
    if (busy) return;
    busy = true;
    try {
      const body = await getJSON(url);
      if (!body.item && keepOnEmpty) { renderProgress(body.progress); setStatus(body.message); return; }
      if (!silent) setStatus('');
      render(body);
    } catch (e) { setStatus(e.message, true); } finally { busy = false; }
  }

  const next = () => load(api + 'next/' + (item ? '?after=' + item.index : ''));
  const prev = () => item && load(api + 'prev/?before=' + item.index, true);

  async function post(path, data) {
    busy = true;
    try { return await wb.post(api + 'items/' + item.row_id + '/' + path, data); } finally { busy = false; }
  }

  async function decide(choice, reason) {
    if (!item || busy) return;
    try {
      const body = await post('review/', {choice: choice, reason: reason || '', time_ms: Math.round(performance.now() - shownAt)});
      renderProgress(body.progress);
      setStatus('Saved row ' + body.index + ': ' + describe(body.my_review) + '.');
      await load(api + 'next/?after=' + item.index, false, true);
    } catch (e) { setStatus(e.message, true); }
  }

  function openDialog(title, label, text, onSubmit) {
    $('rv-dialog-h').textContent = title;
    $('rv-dialog-label').textContent = label;
    $('rv-dialog-text').value = text || '';
    $('rv-dialog-error').textContent = '';
    dialogSubmit = onSubmit;
    $('rv-dialog').showModal();
    $('rv-dialog-text').focus();
  }

  $('rv-dialog-form').addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const text = $('rv-dialog-text').value;
    try {
      await dialogSubmit(text);
      $('rv-dialog').close();
    } catch (e) { $('rv-dialog-error').textContent = e.message; }
  });
  $('rv-dialog-cancel').addEventListener('click', () => $('rv-dialog').close());
  $('rv-dialog-text').addEventListener('keydown', (ev) => {
    if (ev.key === 'Enter' && (ev.ctrlKey || ev.metaKey)) { ev.preventDefault(); $('rv-dialog-form').requestSubmit(); }
  });

  function edit(name) {
    if (!item) return;
    const pane = item[name];
    openDialog('Edit the ' + name + ' response', 'A new revision is saved; the original stays in the dataset.', pane.text, async (text) => {
      const body = await post('edit/', {side: pane.side, text: text});
      render({item: body.item});
      setStatus('Saved revision ' + body.revision + ' of the ' + name + ' response.');
    });
  }

  function flag() {
    if (!item) return;
    openDialog('Flag this pair', 'Why? (admins see this in the conflict queue)', '', async (reason) => {
      if (!reason.trim()) throw new Error('Say why you flag this pair.');
      $('rv-dialog').close();
      await decide('flag', reason);
    });
  }

  function comment() {
    if (!item) return;
    openDialog('Comment on this pair', 'Comment', '', async (text) => {
      const body = await post('comments/', {text: text});
      render({item: body.item});
      setStatus('Comment saved.');
    });
  }

  // Approve and Swap act on the dataset's labels: offered only while the labels are shown (the sides are
  // randomised per reviewer, so with hidden labels "as labelled" means nothing you can see).
  function toggleLabels() {
    labelsShown = !labelsShown;
    ['left', 'right'].forEach((n) => { $('rv-' + n + '-tag').hidden = !labelsShown; });
    $('rv-labelled-actions').hidden = !labelsShown;
    $('rv-labels-button').lastChild.textContent = labelsShown ? ' Hide labels' : ' Show labels';
  }
  function labelled(choice) {
    if (!labelsShown) {
      setStatus('The dataset\'s labels are hidden (sides are randomised): press L to show which response is ' +
                'labelled chosen, then ' + (choice === 'approve' ? 'A approves it.' : 'S swaps it.'));
      return;
    }
    decide(choice);
  }

  const ACTIONS = {
    left: () => decide('left'), right: () => decide('right'), approve: () => labelled('approve'),
    swap: () => labelled('swap'), reject: () => decide('reject'), flag: flag,
    'edit-left': () => edit('left'), 'edit-right': () => edit('right'), comment: comment,
    labels: toggleLabels, prev: prev, next: next,
  };
  const KEYS = {'1': 'left', '2': 'right', a: 'approve', s: 'swap', r: 'reject', f: 'flag', e: 'edit-left',
    w: 'edit-right', c: 'comment', l: 'labels', p: 'prev', k: 'prev', n: 'next', j: 'next'};

  root.querySelectorAll('[data-act]').forEach((btn) => btn.addEventListener('click', () => ACTIONS[btn.dataset.act]()));
  document.addEventListener('keydown', (ev) => {
    if (ev.ctrlKey || ev.metaKey || ev.altKey || $('rv-dialog').open) return;
    const tag = (ev.target.tagName || '').toLowerCase();
    if (tag === 'input' || tag === 'textarea' || tag === 'select' || ev.target.isContentEditable) return;
    const action = KEYS[ev.key.toLowerCase()];
    if (!action) return;
    ev.preventDefault();
    ACTIONS[action]();
  });

  const start = root.dataset.startRow;
  if (start) load(api + 'items/' + start + '/'); else next();
})();
