"""The stylesheet and script of the HTML report (kept apart from the Python that fills it in).

Every selector is scoped under ``.wi`` so the report can sit inside a Jupyter notebook without
restyling it. The script reads its data from a ``<script type="application/json">`` block and
builds every element with ``textContent``: nothing taken from a trace is ever parsed as HTML.
``__ROOT__`` is replaced by the report's element id (hex digits only).
"""

from __future__ import annotations

__all__ = ["CSS", "JS", "static_page"]

CSS = r"""
.wi{--bg:#f4f5f8;--card:#fff;--ink:#1d2330;--muted:#5d6678;--line:#e3e6ec;--accent:#3b5bdb;
font:14px/1.5 system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;color:var(--ink);
background:var(--bg);padding:28px 32px 40px;box-sizing:border-box;min-width:760px}
.wi *{box-sizing:border-box}
.wi h1{font-size:22px;margin:0 0 2px;font-weight:650;letter-spacing:-.01em}
.wi h2{font-size:16px;margin:0 0 12px;font-weight:650}
.wi .wi-sub{color:var(--muted);margin:0 0 18px;word-break:break-all}
.wi .wi-brand{color:var(--accent);font-weight:700}
.wi .wi-lead{font-size:16px;margin:0 0 20px;max-width:70em}
.wi .wi-cards{display:grid;grid-template-columns:repeat(auto-fit,minmax(170px,1fr));gap:12px;margin:0 0 18px}
.wi .wi-card{background:var(--card);border:1px solid var(--line);border-radius:10px;padding:12px 14px}
.wi .wi-card .k{color:var(--muted);font-size:12px;text-transform:uppercase;letter-spacing:.04em}
.wi .wi-card .v{font-size:24px;font-weight:650;line-height:1.25;font-variant-numeric:tabular-nums}
.wi .wi-card .d{color:var(--muted);font-size:12.5px}
.wi section{background:var(--card);border:1px solid var(--line);border-radius:12px;padding:18px 20px;margin:0 0 18px}
.wi .wi-note{color:var(--muted);font-size:12.5px;margin:6px 0 0}
.wi .wi-bar{display:flex;height:22px;border-radius:6px;overflow:hidden;background:#eef0f4}
.wi .wi-bar>span{display:block;height:100%}
.wi .wi-legend{display:flex;flex-wrap:wrap;gap:6px 16px;margin:10px 0 0;font-size:12.5px;color:var(--muted)}
.wi .wi-legend>span{display:inline-flex;align-items:center;gap:6px}
.wi .wi-sw{display:inline-block;width:11px;height:11px;border-radius:3px;flex:none}
.wi .wi-strip{margin:0 0 16px}
.wi .wi-strip-label{font-weight:600;margin:0 0 4px}
.wi .wi-strip-box{position:relative;padding-top:18px}
.wi .wi-strip-svg{display:block;width:100%;height:72px;border-radius:4px;background:#eef0f4;cursor:crosshair}
.wi .wi-marks{position:absolute;left:0;right:0;top:0;height:100%;pointer-events:none}
.wi .wi-mark{position:absolute;top:14px;bottom:0;border-left:1px dashed rgba(29,35,48,.35)}
.wi .wi-mark>span{position:absolute;top:-15px;left:3px;font-size:11px;color:var(--muted);white-space:nowrap}
.wi .wi-axis{position:relative;height:18px;font-size:11px;color:var(--muted)}
.wi .wi-axis>span{position:absolute;top:2px;transform:translateX(-50%);white-space:nowrap}
.wi .wi-steps-svg{display:block;width:100%;max-width:1100px;height:auto}
.wi .wi-steps-svg text{font:11px system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;fill:#5d6678}
.wi .wi-tip{position:fixed;z-index:10;display:none;pointer-events:none;background:#1d2330;color:#fff;
border-radius:8px;padding:8px 10px;font-size:12px;box-shadow:0 6px 20px rgba(0,0,0,.25);max-width:360px}
.wi .wi-tip-t{font-weight:600;margin:0 0 4px}
.wi .wi-tip-r{display:flex;align-items:center;gap:6px}
.wi .wi-tip-r b{margin-left:auto;padding-left:12px;font-weight:600;font-variant-numeric:tabular-nums}
.wi .wi-finding{border:1px solid var(--line);border-left:5px solid var(--c,#888);border-radius:10px;padding:14px 16px;margin:0 0 14px}
.wi .wi-finding h3{font-size:15px;margin:0 0 4px;font-weight:650}
.wi .wi-chip{display:inline-block;font-size:11px;font-weight:600;padding:1px 8px;border-radius:10px;color:var(--ci,#fff);
background:var(--c,#888);margin-right:6px;vertical-align:1px;white-space:nowrap}
.wi .wi-stat{color:var(--muted);margin:0 0 8px}
.wi .wi-finding h4{font-size:12px;text-transform:uppercase;letter-spacing:.04em;color:var(--muted);margin:10px 0 4px}
.wi .wi-finding ul,.wi .wi-finding ol{margin:0;padding-left:20px}
.wi .wi-finding li{margin:2px 0}
.wi code,.wi pre,.wi .mono{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,"DejaVu Sans Mono",monospace;font-size:12.5px}
.wi pre{background:#1f2430;color:#e6e9ef;padding:10px 12px;border-radius:8px;overflow-x:auto;margin:6px 0;white-space:pre}
.wi .wi-fix{background:#f3f8f1;border-radius:8px;padding:10px 12px;margin:10px 0 0}
.wi .wi-fix b{color:#2b7a2b}
.wi .wi-verify{color:var(--muted);margin:6px 0 0}
.wi .wi-docs{margin:8px 0 0}
.wi .wi-docs summary{cursor:pointer;color:var(--accent);font-weight:600}
.wi .wi-doc{border-left:3px solid var(--line);padding:2px 0 2px 12px;margin:6px 0 0;font-size:13px}
.wi .wi-doc h5{font-size:13.5px;margin:12px 0 4px}
.wi .wi-doc h6{font-size:13px;margin:10px 0 4px}
.wi .wi-doc p{margin:6px 0}
.wi table{border-collapse:collapse;width:100%;font-size:12.5px}
.wi th,.wi td{text-align:left;padding:5px 8px;border-bottom:1px solid var(--line);vertical-align:top}
.wi th{color:var(--muted);font-weight:600;white-space:nowrap;user-select:none}
.wi th[data-sort]{cursor:pointer}
.wi th[data-sort]:hover{color:var(--ink)}
.wi th.asc::after{content:" \25B2";font-size:9px}
.wi th.desc::after{content:" \25BC";font-size:9px}
.wi td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
.wi td .cut{display:block;max-width:100%;overflow:hidden;text-overflow:ellipsis;white-space:nowrap}
.wi table.wi-gaps{table-layout:fixed}
.wi table.wi-gaps th{overflow:hidden;text-overflow:ellipsis}
.wi table.wi-gaps .wi-chip{display:inline-block;max-width:100%;overflow:hidden;text-overflow:ellipsis;white-space:nowrap;vertical-align:bottom}
.wi .wi-table-wrap{overflow-x:auto}
.wi .wi-foot{color:var(--muted);font-size:12px;margin-top:6px}
.wi .wi-empty{color:var(--muted);font-style:italic}
"""

JS = r"""
(function () {
  "use strict";
  var root = document.getElementById("__ROOT__");
  if (!root) { return; }
  var data = JSON.parse(document.getElementById("__ROOT__-data").textContent);
  var SVGNS = "http://www.w3.org/2000/svg";
  var classes = data.classes;

  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) { e.className = cls; }
    if (text !== undefined && text !== null) { e.textContent = String(text); }
    return e;
  }
  function sv(tag, attrs) {
    var e = document.createElementNS(SVGNS, tag);
    Object.keys(attrs || {}).forEach(function (k) { e.setAttribute(k, String(attrs[k])); });
    return e;
  }
  function fmt(ns) {
    var a = Math.abs(ns);
    if (a === 0) { return "0"; }
    if (a >= 1e9) { return (ns / 1e9).toFixed(2) + " s"; }
    if (a >= 1e7) { return (ns / 1e6).toFixed(0) + " ms"; }
    if (a >= 1e6) { return (ns / 1e6).toFixed(1) + " ms"; }
    if (a >= 1e3) { return (ns / 1e3).toFixed(1) + " us"; }
    return Math.round(ns) + " ns";
  }
  function niceStep(span, target) {
    var raw = span / target, p = Math.pow(10, Math.floor(Math.log10(raw))), m = raw / p;
    return (m < 1.5 ? 1 : m < 3.5 ? 2 : m < 7.5 ? 5 : 10) * p;
  }

  var tip = el("div", "wi-tip");
  root.appendChild(tip);
  function showTip(ev, title, rows) {
    tip.textContent = "";
    tip.appendChild(el("div", "wi-tip-t", title));
    rows.forEach(function (r) {
      var line = el("div", "wi-tip-r");
      var sw = el("span", "wi-sw");
      sw.style.background = r.color;
      line.appendChild(sw);
      line.appendChild(el("span", null, r.label));
      line.appendChild(el("b", null, r.value));
      tip.appendChild(line);
    });
    tip.style.display = "block";
    var x = ev.clientX + 14, y = ev.clientY + 14;
    var w = tip.offsetWidth, h = tip.offsetHeight;
    if (x + w > window.innerWidth - 8) { x = ev.clientX - w - 14; }
    if (y + h > window.innerHeight - 8) { y = ev.clientY - h - 14; }
    tip.style.left = Math.max(4, x) + "px";
    tip.style.top = Math.max(4, y) + "px";
  }
  function hideTip() { tip.style.display = "none"; }

  function stepAt(tRel) {
    for (var i = 0; i < data.steps.length; i++) {
      var s = data.steps[i];
      if (tRel >= s.s && tRel < s.s + s.d) { return s.n; }
    }
    return null;
  }

  // ---- timeline strips ------------------------------------------------------------------
  function drawStrip(host, d) {
    var W = d.bins, H = 100;
    var wrap = el("div", "wi-strip");
    wrap.appendChild(el("div", "wi-strip-label", d.label));
    var box = el("div", "wi-strip-box");
    var s = sv("svg", {viewBox: "0 0 " + W + " " + H, preserveAspectRatio: "none", "class": "wi-strip-svg",
                       role: "img", "aria-label": "device activity over time: " + d.label});
    var base = new Array(W).fill(0);
    classes.forEach(function (c) {
      var arr = d.parts[c.key];
      if (!arr) { return; }
      var path = [];
      var i = 0;
      while (i < W) {
        if (arr[i] <= 0) { base[i] += Math.max(arr[i], 0); i++; continue; }
        var j = i + 1;
        while (j < W && arr[j] === arr[i] && base[j] === base[i]) { j++; }
        var y0 = H - base[i] * H / 1000, y1 = H - (base[i] + arr[i]) * H / 1000;
        path.push("M" + i + " " + y1.toFixed(2) + "H" + j + "V" + y0.toFixed(2) + "H" + i + "Z");
        for (var k = i; k < j; k++) { base[k] += arr[k]; }
        i = j;
      }
      if (path.length) {
        var p = sv("path", {d: path.join(""), fill: c.color, "shape-rendering": "crispEdges"});
        p.setAttribute("data-class", c.key);
        s.appendChild(p);
      }
    });
    box.appendChild(s);
    var marks = el("div", "wi-marks");
    var span = data.window.duration_ns;
    var every = Math.max(1, Math.ceil(data.steps.length / 24));
    data.steps.forEach(function (st, idx) {
      var m = el("div", "wi-mark");
      m.style.left = (100 * st.s / span) + "%";
      if (idx % every === 0) { m.appendChild(el("span", null, "step " + st.n)); }
      marks.appendChild(m);
    });
    box.appendChild(marks);
    wrap.appendChild(box);
    var axis = el("div", "wi-axis");
    var tick = niceStep(span, 8);
    for (var t = 0; t <= span * 1.0001; t += tick) {
      var lab = el("span", null, fmt(t));
      lab.style.left = (100 * t / span) + "%";
      axis.appendChild(lab);
    }
    wrap.appendChild(axis);
    s.addEventListener("mousemove", function (ev) {
      var r = s.getBoundingClientRect();
      var b = Math.min(W - 1, Math.max(0, Math.floor((ev.clientX - r.left) / r.width * W)));
      var a = b * d.bin_ns, rows = [];
      classes.forEach(function (c) {
        var arr = d.parts[c.key];
        if (arr && arr[b] > 0) { rows.push({color: c.color, label: c.label, value: (arr[b] / 10).toFixed(1) + "%  " + fmt(arr[b] / 1000 * d.bin_ns)}); }
      });
      var sn = stepAt(a);
      showTip(ev, fmt(a) + " \u2013 " + fmt(a + d.bin_ns) + (sn === null ? "" : "  (step " + sn + ")"), rows);
    });
    s.addEventListener("mouseleave", hideTip);
    host.appendChild(wrap);
  }

  var tl = root.querySelector(".wi-timeline");
  if (tl) {
    if (data.devices.length) {
      data.devices.forEach(function (d) { drawStrip(tl, d); });
    } else {
      tl.appendChild(el("p", "wi-empty", data.timeline_note || "No device activity to draw."));
    }
  }

  // ---- per-step stacked bars ------------------------------------------------------------
  var sh = root.querySelector(".wi-steps");
  if (sh && data.steps.length) {
    var n = data.steps.length, VW = 1000, VH = 300, L = 62, R = 10, T = 12, B = 34;
    var maxT = 0;
    data.steps.forEach(function (st) {
      var tot = 0;
      classes.forEach(function (c) { tot += st.parts[c.key] || 0; });
      st.total = tot;
      maxT = Math.max(maxT, tot);
    });
    var g = sv("svg", {viewBox: "0 0 " + VW + " " + VH, "class": "wi-steps-svg", role: "img", "aria-label": "time per step by activity"});
    var plotW = VW - L - R, plotH = VH - T - B, slot = plotW / n, bw = Math.max(1, Math.min(56, slot * 0.72));
    var yt = niceStep(maxT || 1, 5);
    for (var y = 0; y <= maxT * 1.0001; y += yt) {
      var yy = T + plotH - y / maxT * plotH;
      g.appendChild(sv("line", {x1: L, x2: VW - R, y1: yy, y2: yy, stroke: "#e3e6ec"}));
      var tx = sv("text", {x: L - 8, y: yy + 4, "text-anchor": "end"});
      tx.textContent = fmt(y);
      g.appendChild(tx);
    }
    var lblEvery = Math.max(1, Math.ceil(n / 30));
    data.steps.forEach(function (st, i) {
      var x = L + i * slot + (slot - bw) / 2, acc = 0;
      var grp = sv("g", {});
      classes.forEach(function (c) {
        var v = st.parts[c.key] || 0;
        if (v <= 0) { return; }
        var h = v / maxT * plotH;
        grp.appendChild(sv("rect", {x: x.toFixed(2), y: (T + plotH - (acc + v) / maxT * plotH).toFixed(2), width: bw.toFixed(2), height: h.toFixed(2), fill: c.color}));
        acc += v;
      });
      var hit = sv("rect", {x: (L + i * slot).toFixed(2), y: T, width: slot.toFixed(2), height: plotH, fill: "transparent"});
      hit.addEventListener("mousemove", function (ev) {
        var rows = [];
        classes.forEach(function (c) {
          var v = st.parts[c.key] || 0;
          if (v > 0) { rows.push({color: c.color, label: c.label, value: fmt(v) + "  " + (100 * v / st.total).toFixed(0) + "%"}); }
        });
        showTip(ev, "step " + st.n + ": " + fmt(st.d), rows);
      });
      hit.addEventListener("mouseleave", hideTip);
      grp.appendChild(hit);
      if (i % lblEvery === 0) {
        var lt = sv("text", {x: (L + i * slot + slot / 2).toFixed(2), y: VH - B + 16, "text-anchor": "middle"});
        lt.textContent = String(st.n);
        grp.appendChild(lt);
      }
      g.appendChild(grp);
    });
    var xl = sv("text", {x: L + plotW / 2, y: VH - 4, "text-anchor": "middle"});
    xl.textContent = "step";
    g.appendChild(xl);
    sh.appendChild(g);
  }

  // ---- sortable gap table -----------------------------------------------------------------
  var table = root.querySelector("table.wi-gaps");
  if (table) {
    var heads = table.querySelectorAll("th[data-sort]");
    Array.prototype.forEach.call(heads, function (th) {
      th.addEventListener("click", function () {
        var col = Array.prototype.indexOf.call(th.parentNode.children, th);
        var num = th.getAttribute("data-sort") === "num";
        var asc = !th.classList.contains("asc");
        Array.prototype.forEach.call(heads, function (h) { h.classList.remove("asc", "desc"); });
        th.classList.add(asc ? "asc" : "desc");
        var body = table.tBodies[0];
        var rows = Array.prototype.slice.call(body.rows);
        rows.sort(function (a, b) {
          var x = a.cells[col].getAttribute("data-v"), z = b.cells[col].getAttribute("data-v");
          var c = num ? (parseFloat(x) - parseFloat(z)) : x.localeCompare(z);
          return asc ? c : -c;
        });
        rows.forEach(function (r) { body.appendChild(r); });
      });
    });
  }
})();
"""


def static_page(title: str, body: str, style: str = "") -> str:
    """A self-contained HTML page with no script: the shared stylesheet (plus ``style``) and a
    Content-Security-Policy that allows no network access. ``title`` is already escaped."""
    csp = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{csp}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{title}</title>"
        f'<style>{CSS}{style}</style></head><body style="margin:0">{body}</body></html>\n'
    )
