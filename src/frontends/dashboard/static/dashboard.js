// The dashboard page: polls the state endpoint once a second and draws with uPlot.
// Every text from the server goes through textContent: model names and log lines are never markup.
(() => {
  'use strict';
  const WINDOW_MS = 15 * 60 * 1000;
  const $ = (id) => document.getElementById(id);
  const series = new Map(); // model -> samples
  let selected = sessionStorage.getItem('nereid.model') || '';
  let lastT = 0;
  let models = [];
  const charts = new Map();

  function key() { return sessionStorage.getItem('nereid.key') || ''; }
  function headers() { const k = key(); return k ? { Authorization: `Bearer ${k}` } : {}; }
  function el(tag, props, ...children) {
    const e = document.createElement(tag);
    Object.assign(e, props || {});
    for (const c of children) e.append(c);
    return e;
  }
  function fmt(n, digits = 0) {
    if (n === null || n === undefined) return '–';
    return Number(n).toLocaleString('en-US', { maximumFractionDigits: digits });
  }
  function bytes(n) {
    if (n === undefined || n === null) return '–';
    const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
    let i = 0;
    while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
    return `${n.toFixed(i === 0 ? 0 : 1)} ${units[i]}`;
  }

  function showServer(s) {
    const parts = [
      `${s.name} ${s.version}`, `up ${fmt(s.uptimeSecs)} s`,
      s.live ? 'live' : 'not live', s.ready ? 'ready' : 'not ready',
      Object.entries(s.ports).filter(([, p]) => p !== undefined && p !== null).map(([k, p]) => `${k} ${p}`)
        .join(', '),
      `Node ${s.node}`, `${s.cores} cores`,
      `RSS ${bytes(s.memory.rssBytes)} of ${bytes(s.memory.totalBytes)}`,
    ];
    if (s.memoryBudgetBytes) parts.push(`budget ${bytes(s.memoryBudgetBytes)}`);
    // Each poll changes a text or two: those are set in place, so the page does little work while it is open.
    const box = $('server');
    if (box.children.length !== parts.length) {
      box.replaceChildren(...parts.map((p) => el('span', { textContent: p })));
      return;
    }
    parts.forEach((p, i) => setText(box.children[i], p));
  }

  function setText(node, text) {
    if (node.textContent !== text) node.textContent = text;
  }

  async function control(name, action) {
    const status = $('status');
    status.textContent = `${action} ${name}…`;
    try {
      const r = await fetch(`/v2/repository/models/${encodeURIComponent(name)}/${action}`, {
        method: 'POST', headers: { ...headers(), 'Content-Type': 'application/json' }, body: '{}',
      });
      const text = await r.text();
      let msg = '';
      try { msg = text ? JSON.parse(text).error || '' : ''; } catch { msg = text; }
      status.textContent = r.ok ? `${action} ${name}: done` : `${action} ${name}: ${r.status} ${msg}`;
    } catch (err) {
      status.textContent = `${action} ${name}: ${err}`;
    }
    poll();
  }

  function batchingText(m) {
    if (!m.batching) return '–';
    return m.maxBatchSize ? `${m.batching} (max ${m.maxBatchSize})` : m.batching;
  }

  let modelsShown = '';
  function showModels() {
    // The table is built again only when something but the request rates changed; else the rates are set in place.
    const shape = JSON.stringify([selected, models.map((m) => ({ ...m, requestsPerSec: 0 }))]);
    if (shape === modelsShown) {
      for (const m of models) {
        const cell = $('models').querySelector(`tr[data-model="${CSS.escape(m.name)}"] .rps`);
        if (cell) setText(cell, fmt(m.requestsPerSec, 1));
      }
      return;
    }
    modelsShown = shape;
    const rows = models.map((m) => {
      const tr = el('tr', { className: m.name === selected ? 'selected' : '' });
      tr.dataset.model = m.name;
      const pick = el('button', { textContent: m.name, title: 'Show charts' });
      pick.setAttribute('aria-pressed', String(m.name === selected));
      pick.addEventListener('click', () => { select(m.name); });
      const versions = el('td');
      for (const v of m.versions) {
        const span = el('span', { className: `state-${v.state}`, textContent: `${v.version || '–'}: ${v.state}` });
        if (v.reason) span.title = v.reason;
        versions.append(span, ' ');
        if (v.reason) versions.append(el('small', { textContent: `(${v.reason}) ` }));
      }
      const actions = el('td');
      for (const action of ['load', 'unload']) {
        const loaded = m.versions.some((v) => v.state === 'READY');
        const b = el('button', { textContent: action === 'load' && loaded ? 'reload' : action });
        b.dataset.action = action;
        b.addEventListener('click', () => control(m.name, action));
        actions.append(b);
      }
      tr.append(
        el('td', {}, pick), versions, el('td', { textContent: m.backend || '–' }),
        el('td', { className: 'num', textContent: fmt(m.instances) }),
        el('td', { textContent: batchingText(m) }),
        el('td', { className: 'num', textContent: bytes(m.memoryBytes) }),
        el('td', { className: 'num rps', textContent: fmt(m.requestsPerSec, 1) }),
        actions,
      );
      return tr;
    });
    $('models').replaceChildren(...rows);
  }

  function select(name) {
    selected = name;
    sessionStorage.setItem('nereid.model', name);
    showModels();
    draw(true);
  }

  const CHARTS = [
    {
      id: 'rps', title: 'Requests and failures per second',
      lines: [['requests/s', 'requestsPerSec', '#2563eb'], ['failures/s', 'failuresPerSec', '#dc2626']],
    },
    { id: 'latency', title: 'Latency (µs)', lines: [['p50', 'p50Us', '#2563eb'], ['p99', 'p99Us', '#9333ea']] },
    {
      id: 'queue', title: 'Queue time against compute time (µs per request)',
      lines: [['queue', 'queueUs', '#ea580c'], ['compute', 'computeUs', '#16a34a']],
    },
    { id: 'cache', title: 'Cache hit rate', lines: [['hit rate', 'cacheHitRate', '#0891b2']] },
    { id: 'ttft', title: 'Time to first token, p50 (µs)', lines: [['first token', 'firstTokenP50Us', '#db2777']] },
  ];

  function bars() { return uPlot.paths.bars({ size: [0.6] }); }

  function chartWidth(box) { return Math.max(240, box.clientWidth - 4); }

  function lineChart(spec, samples) {
    const data = [samples.map((s) => s.t / 1000), ...spec.lines.map(([, field]) => samples.map((s) => s[field]))];
    return data;
  }

  function batchData(samples, preferred) {
    const counts = new Map();
    for (const s of samples) {
      for (const [size, n] of Object.entries(s.batches)) counts.set(Number(size), (counts.get(Number(size)) || 0) + n);
    }
    for (const p of preferred) if (!counts.has(p)) counts.set(p, 0);
    const sizes = [...counts.keys()].sort((a, b) => a - b);
    return [sizes, sizes.map((x) => counts.get(x)), sizes.map((x) => (preferred.includes(x) ? counts.get(x) : null))];
  }

  // Charts scrolled out of view keep their newest data aside and draw it when they come back into view:
  // drawing is most of what an open page costs its machine each second.
  const inView = new Set();
  const watcher = typeof IntersectionObserver === 'function'
    ? new IntersectionObserver((entries) => {
      for (const e of entries) {
        const id = e.target.dataset.chart;
        if (!e.isIntersecting) { inView.delete(id); continue; }
        inView.add(id);
        const c = charts.get(id);
        if (c && c.pending) { c.plot.setData(c.pending); c.pending = null; }
      }
    })
    : null;

  function draw(rebuild) {
    const box = $('charts');
    const samples = series.get(selected) || [];
    const model = models.find((m) => m.name === selected);
    $('chart-title').textContent = selected ? `Model ${selected}, last 15 minutes` : 'No model selected';
    if (rebuild) {
      for (const c of charts.values()) {
        if (watcher) watcher.unobserve(c.wrap);
        c.plot.destroy();
      }
      charts.clear();
      inView.clear();
      box.replaceChildren();
    }
    const specs = [...CHARTS, { id: 'batches', title: 'Executed batch sizes (preferred sizes highlighted)' }];
    for (const spec of specs) {
      const data = spec.id === 'batches'
        ? batchData(samples, model ? model.preferredBatchSizes : [])
        : lineChart(spec, samples);
      let c = charts.get(spec.id);
      if (!c) {
        const wrap = el('div', { className: 'chart', id: `chart-${spec.id}` }, el('h3', { textContent: spec.title }));
        box.append(wrap);
        const opts = spec.id === 'batches'
          ? {
            width: chartWidth(wrap), height: 180, scales: { x: { time: false } },
            series: [{ label: 'batch size' },
              { label: 'executions', fill: '#93c5fd', stroke: '#2563eb', paths: bars(), points: { show: false } },
              { label: 'preferred', fill: '#fcd34d', stroke: '#b45309', paths: bars(), points: { show: false } }],
          }
          : {
            width: chartWidth(wrap), height: 180, axes: [{}, { size: 70 }],
            series: [{}, ...spec.lines.map(([label, , color]) => ({ label, stroke: color, width: 1.5 }))],
          };
        c = { wrap, plot: new uPlot(opts, data, wrap), pending: null };
        charts.set(spec.id, c);
        wrap.dataset.chart = spec.id;
        if (watcher) watcher.observe(wrap);
      } else if (!watcher || inView.has(spec.id)) {
        c.plot.setData(data);
        c.pending = null;
      } else {
        c.pending = data;
      }
      c.wrap.dataset.points = String(data[0].length);
      const lastValues = data.slice(1).map((d) => d[d.length - 1]);
      c.wrap.dataset.last = JSON.stringify(lastValues);
    }
  }

  let problemsShown = '';
  function showProblems(problems) {
    const shape = JSON.stringify(problems);
    if (shape === problemsShown) return;
    problemsShown = shape;
    const items = problems.slice().reverse().map((p) => el('li', {
      className: p.level, textContent: `${p.time} ${p.level}${p.model ? ` [${p.model}]` : ''}: ${p.message}`,
    }));
    $('problems').replaceChildren(...(items.length ? items : [el('li', { textContent: 'none' })]));
  }

  let polling = false;
  async function poll() {
    if (polling) return;
    polling = true;
    try {
      const r = await fetch(`/dashboard/api/state?since=${lastT}`, { headers: headers(), cache: 'no-store' });
      if (r.status === 401 || r.status === 403) {
        $('auth').hidden = false;
        $('auth-message').textContent =
          r.status === 401 ? 'This server needs an API key.' : 'This key may not read metadata.';
        return;
      }
      if (!r.ok) { $('status').textContent = `state: ${r.status}`; return; }
      $('auth').hidden = true;
      const state = await r.json();
      showServer(state.server);
      models = state.models;
      if (!selected || !models.some((m) => m.name === selected)) selected = models[0] ? models[0].name : '';
      const cutoff = state.now - WINDOW_MS;
      for (const [name, fresh] of Object.entries(state.series)) {
        const list = (series.get(name) || []).concat(fresh).filter((s) => s.t >= cutoff);
        series.set(name, list);
      }
      lastT = state.now;
      showModels();
      showProblems(state.problems);
      draw(charts.size === 0);
    } catch (err) {
      $('status').textContent = `state: ${err}`;
    } finally {
      polling = false;
    }
  }

  $('auth-form').addEventListener('submit', (e) => {
    e.preventDefault();
    sessionStorage.setItem('nereid.key', $('auth-key').value);
    $('auth-key').value = '';
    poll();
  });
  window.addEventListener('resize', () => {
    for (const c of charts.values()) c.plot.setSize({ width: chartWidth(c.wrap), height: 180 });
  });
  poll();
  setInterval(poll, 1000);
})();
