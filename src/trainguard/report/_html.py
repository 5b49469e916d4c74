"""The page shell every report shares: escaping, inline data, style, the table script, and the
Content-Security-Policy that keeps the file offline.

Three rules make a report safe to open whatever the store holds (run names, params, results and
exception messages are user text):

* every string reaches the page through :func:`text` (HTML-escaped, control characters shown as
  visible symbols) or through the inline JSON block, whose ``<``, ``>`` and ``&`` are written as
  ``\\u003c``-style escapes so that no ``</script>`` can end it, and which the script only ever
  puts into the page with ``textContent``;
* the page's policy (``default-src 'none'``, scripts and styles allowed by their SHA-256 only)
  forbids any request and any script but ours, so even a missed escape could not run or fetch;
* no fonts, images or scripts come from anywhere: the system font stack, inline SVG, one inline
  script of our own.
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
import math
import re
from collections.abc import Iterable
from typing import Any

__all__ = ["text", "to_json_block", "page", "fmt_bytes", "fmt_seconds", "kv_table"]

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


def _visible_control(match: re.Match[str]) -> str:
    code = ord(match.group())
    return "\u2421" if code == 0x7F else chr(0x2400 + code)


def clean(value: Any) -> str:
    """``value`` as a string with control characters replaced by their visible Unicode symbols
    (U+2400..U+2421) and unpaired surrogates by U+FFFD."""
    s = value if isinstance(value, str) else str(value)
    s = _CONTROL.sub(_visible_control, s)
    return s.encode("utf-8", "replace").decode("utf-8") if _has_surrogate(s) else s


def _has_surrogate(s: str) -> bool:
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def text(value: Any) -> str:
    """Escape any value for HTML or SVG text and attribute values (quotes included)."""
    return html.escape(clean(value), quote=True)


def _json_default(value: Any) -> Any:
    return str(value)


def _finite(value: Any) -> Any:
    """JSON has no NaN/Infinity: write them as strings so JSON.parse never fails."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {str(k): _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def to_json_block(data: Any) -> str:
    """JSON safe to place inside ``<script type="application/json">``: no ``<``, ``>``, ``&``,
    U+2028/U+2029 or unpaired surrogates in the text."""
    raw = json.dumps(_finite(data), separators=(",", ":"), ensure_ascii=False, default=_json_default)
    raw = clean_json_text(raw)
    return (
        raw.replace("<", "\\u003c")
        .replace(">", "\\u003e")
        .replace("&", "\\u0026")
        .replace("\u2028", "\\u2028")
        .replace("\u2029", "\\u2029")
    )


def clean_json_text(raw: str) -> str:
    return raw.encode("utf-8", "replace").decode("utf-8") if _has_surrogate(raw) else raw


def fmt_bytes(value: float | None, *, signed: bool = False) -> str:
    from trainguard.units import format_bytes

    if value is None:
        return "-"
    return format_bytes(value, signed=signed)


def fmt_seconds(value: float | None) -> str:
    from trainguard.units import format_duration

    if value is None:
        return "-"
    if 0 < value < 1e-3:
        return f"{value * 1e6:.0f} µs"
    return format_duration(value)


def kv_table(rows: Iterable[tuple[str, Any]], *, css_class: str = "kv") -> str:
    """A two-column table of already-plain values (escaped here)."""
    body = "".join(f"<tr><th>{text(k)}</th><td>{text(v)}</td></tr>" for k, v in rows)
    return f'<table class="{css_class}">{body}</table>'


def _sha256(source: str) -> str:
    return base64.b64encode(hashlib.sha256(source.encode("utf-8")).digest()).decode("ascii")


def page(*, title: str, body: str, data: Any, kind: str) -> str:
    """The whole document: ``body`` is trusted markup built with :func:`text`; ``data`` becomes the
    inline JSON block the script reads (tables)."""
    from trainguard import __version__

    csp = (
        "default-src 'none'; "
        f"script-src 'sha256-{_sha256(_SCRIPT)}'; "
        f"style-src 'sha256-{_sha256(_STYLE)}'; "
        "img-src data:; base-uri 'none'; form-action 'none'"
    )
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{csp}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f'<meta name="generator" content="trainguard {text(__version__)}">'
        f"<title>{text(title)}</title>"
        f"<style>{_STYLE}</style></head>"
        f'<body class="tg-{text(kind)}">{body}'
        f"<footer>Made by trainguard {text(__version__)}. This file is self-contained: it makes no network "
        "request and needs no other file.</footer>"
        f'<script type="application/json" id="tg-data">{to_json_block(data)}</script>'
        f"<script>{_SCRIPT}</script></body></html>\n"
    )


_STYLE = """
:root{--ink:#1d2433;--muted:#5d6b82;--line:#e3e7ee;--bg:#f6f7f9;--card:#fff;--ok:#1b7f3b;--bad:#c62828;
--warn:#9a6700;--accent:#0072B2}
*{box-sizing:border-box}
body{margin:0;background:var(--bg);color:var(--ink);font:14px/1.45 system-ui,-apple-system,"Segoe UI",
Roboto,"Helvetica Neue",Arial,sans-serif}
header.top{background:#1d2433;color:#fff;padding:18px 28px 16px}
header.top .kind{font-size:12px;letter-spacing:.08em;text-transform:uppercase;color:#9fb3d1}
header.top h1{margin:2px 0 4px;font-size:22px;font-weight:600;word-break:break-all}
header.top .sub{color:#c8d3e4;font-size:13px;word-break:break-all}
main{max-width:1240px;margin:0 auto;padding:18px 28px 8px}
section{background:var(--card);border:1px solid var(--line);border-radius:8px;padding:16px 20px;margin:0 0 18px}
section h2{font-size:16px;margin:0 0 4px}
section p.note{color:var(--muted);margin:0 0 12px;font-size:13px}
.badge{display:inline-block;border-radius:10px;padding:1px 9px;font-size:12px;font-weight:600;
vertical-align:middle;margin-left:8px;background:#e8edf5;color:#33415c}
.badge.ok,.badge.completed,.badge.no_leak{background:#dff3e5;color:var(--ok)}
.badge.failed,.badge.leak,.badge.stopped{background:#fbe3e3;color:var(--bad)}
.badge.running,.badge.plateau,.badge.inconclusive,.badge.interrupted{background:#fff1cc;color:var(--warn)}
.banner{background:#fff1cc;border:1px solid #f0d48a;color:#6b4c00;border-radius:8px;padding:10px 14px;margin:0 0 18px}
.cards{display:grid;grid-template-columns:repeat(auto-fit,minmax(170px,1fr));gap:12px;margin:0 0 18px}
.card{background:var(--card);border:1px solid var(--line);border-radius:8px;padding:12px 14px}
.card .v{font-size:22px;font-weight:600;font-variant-numeric:tabular-nums}
.card .l{color:var(--muted);font-size:12px;text-transform:uppercase;letter-spacing:.05em}
.card .s{color:var(--muted);font-size:12px}
svg.meter{display:block;width:100%;height:6px;margin-top:6px}
.cols{display:grid;grid-template-columns:minmax(0,1fr) minmax(0,1fr);gap:18px}.cols>section{min-width:0;overflow-x:auto}
@media (max-width:900px){.cols{grid-template-columns:1fr}}
table{border-collapse:collapse;width:100%;font-variant-numeric:tabular-nums}
table.kv th{text-align:left;font-weight:500;color:var(--muted);width:34%;padding:3px 10px 3px 0;vertical-align:top}
table.kv td{padding:3px 0;word-break:break-word}
table.grid th,table.grid td{padding:5px 8px;border-bottom:1px solid var(--line);text-align:left;vertical-align:top}
table.grid th{font-size:12px;color:var(--muted);font-weight:600;white-space:nowrap;position:sticky;top:0;background:#fff}
table.grid th.sortable{cursor:pointer;user-select:none}
table.grid th.sortable:hover{color:var(--ink)}
table.grid th[aria-sort=ascending]::after{content:" \\25B2";font-size:9px}
table.grid th[aria-sort=descending]::after{content:" \\25BC";font-size:9px}
table.grid td.num{text-align:right;white-space:nowrap}
table.grid th.num{text-align:right}
table.grid td.code{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:12px;
max-width:360px;word-break:break-word}
table.grid tr:hover td{background:#f8fafc}
.st{font-weight:600}.st-ok{color:var(--ok)}.st-failed{color:var(--bad)}.st-pending,.st-running{color:var(--warn)}
.tablebar{display:flex;gap:10px;align-items:center;margin:0 0 10px;flex-wrap:wrap}
.tablebar input,.tablebar select{font:inherit;padding:5px 9px;border:1px solid #cfd6e1;border-radius:6px;background:#fff}
.tablebar input{min-width:280px}
.tablebar .count{color:var(--muted);font-size:13px}
.tablebar button,.more button{font:inherit;padding:4px 10px;border:1px solid #cfd6e1;border-radius:6px;background:#fff;cursor:pointer}
.tablewrap{max-height:640px;overflow:auto;border:1px solid var(--line);border-radius:6px}
.more{padding:8px 0 0;color:var(--muted);font-size:13px}
svg.chart{width:100%;height:auto;display:block;font-size:11px}
svg .tick{fill:#5d6b82;font-size:11px}
svg .axis{fill:#5d6b82;font-size:11px}
svg .lbl{font-size:11px;fill:#33415c}
svg .sym{font-size:12px;font-weight:700}
svg .marker:hover line{stroke-width:3}
svg rect.trial:hover{stroke:#1d2433;stroke-width:1}
.slot{margin:0 0 14px}
.slot h3{font-size:13px;margin:0 0 2px;font-weight:600}
.slot h3 .s{color:var(--muted);font-weight:400}
.legend{display:flex;gap:16px;flex-wrap:wrap;color:var(--muted);font-size:12px;margin:0 0 10px}
.legend i{display:inline-block;width:18px;height:3px;vertical-align:middle;margin-right:5px;border-radius:2px}
.legend i.dash{background:repeating-linear-gradient(90deg,currentColor 0 5px,transparent 5px 8px);height:2px}
.legend i.box{width:12px;height:9px}
.l-rss{background:#0072B2}.l-uss{color:#56B4E9}.l-gpu{background:#009E73}.l-limit{color:#C62828}
.l-recycle{color:#5d6b82}.l-kill-t{color:#C62828}.l-ok{background:#9ccfae}
.l-failed{background:#ef9a9a}.l-run{background:#f3d27a}.l-fit{background:#C62828}.l-band{background:#f4c7c7}
.l-warm{background:#fbe3bf}.l-untrim{color:#b7c0cc}.l-live{background:#CC79A7}
.c0{background:#0072B2}.c1{background:#E69F00}.c2{background:#009E73}.c3{background:#CC79A7}.c4{background:#56B4E9}
.c5{background:#D55E00}.c6{background:#F0E442}.c7{background:#000}
ul.warn{margin:6px 0 0;padding-left:20px}ul.warn li{margin:0 0 6px}
ul.plain{margin:6px 0 0;padding-left:20px}
pre{white-space:pre-wrap;word-break:break-word;background:#f6f7f9;border:1px solid var(--line);border-radius:6px;
padding:10px;font-size:12px;max-height:320px;overflow:auto}
.verdict{font-size:18px;font-weight:600}
.reason{margin:4px 0 0;color:var(--ink)}
.muted{color:var(--muted)}
footer{max-width:1240px;margin:0 auto;padding:4px 28px 28px;color:var(--muted);font-size:12px}
"""

# The table script: builds sortable, filterable tables from the inline JSON. Values are only ever
# written with textContent; class names come from fixed lists, never from the data.
_SCRIPT = r"""
(function(){
"use strict";
var DATA=JSON.parse(document.getElementById("tg-data").textContent);
var KIB=1024,UNITS=["B","KiB","MiB","GiB","TiB"];
function bytes(v){if(v===null||v===undefined||v==="")return "-";var a=Math.abs(v),i=0;
while(a>=KIB&&i<UNITS.length-1){a/=KIB;i++;}var s=(v<0?-a:a);
return (i===0?String(Math.round(s)):s.toFixed(a>=100?0:1))+" "+UNITS[i];}
function sbytes(v){if(v===null||v===undefined)return "-";return (v>0?"+":"")+bytes(v);}
function secs(v){if(v===null||v===undefined)return "-";if(v<0.001)return (v*1e6).toFixed(0)+" \u00b5s";if(v<1)return (v*1000).toFixed(0)+" ms";
if(v<60)return v.toFixed(v<10?2:1)+" s";var m=Math.floor(v/60),s=Math.round(v-60*m);
if(m<60)return m+"m"+(s<10?"0":"")+s+"s";var h=Math.floor(m/60);m=m-60*h;return h+"h"+(m<10?"0":"")+m+"m";}
function show(kind,v){if(kind==="bytes")return bytes(v);if(kind==="sbytes")return sbytes(v);
if(kind==="seconds")return secs(v);if(kind==="num")return (v===null||v===undefined)?"-":String(v);
if(v===null||v===undefined)return "";return String(v);}
var STATUS=["ok","failed","pending","running","interrupted","exception","crashed","os_oom","killed_memory",
"killed_gpu_memory","killed_budget","timeout","framework_oom","not_serializable","skipped"];
function cmp(a,b){var na=(a===null||a===undefined||a===""),nb=(b===null||b===undefined||b==="");
if(na||nb)return na===nb?0:(na?1:-1);if(typeof a==="number"&&typeof b==="number")return a-b;
return String(a).localeCompare(String(b),undefined,{numeric:true});}
function el(tag,cls,txt){var e=document.createElement(tag);if(cls)e.className=cls;
if(txt!==undefined)e.textContent=txt;return e;}
function build(host){var spec=(DATA.tables||{})[host.getAttribute("data-table")];if(!spec)return;
var cols=spec.columns,rows=spec.rows,limit=spec.page||500,shown=limit,sortCol=-1,sortDir=1,order=rows.map(function(_,i){return i;});
var bar=el("div","tablebar"),input=null,select=null,statusCol=-1;
cols.forEach(function(c,i){if(c.kind==="status")statusCol=i;});
if(spec.filter){input=el("input");input.type="search";input.placeholder=spec.placeholder||"filter rows";
input.setAttribute("aria-label","filter");bar.appendChild(input);
if(statusCol>=0){select=el("select");select.setAttribute("aria-label","status");select.appendChild(new Option("any status",""));
var seen={};rows.forEach(function(r){var v=r[statusCol];if(v!==null&&v!==undefined&&!seen[v]){seen[v]=1;
select.appendChild(new Option(String(v),String(v)));}});bar.appendChild(select);}}
var count=el("span","count");bar.appendChild(count);host.appendChild(bar);
var wrap=el("div","tablewrap"),table=el("table","grid"),thead=el("thead"),htr=el("tr"),tbody=el("tbody");
cols.forEach(function(c,i){var th=el("th",(c.kind==="bytes"||c.kind==="sbytes"||c.kind==="seconds"||c.kind==="num")?"num sortable":"sortable",c.label);
th.setAttribute("data-col",String(i));if(c.title)th.title=c.title;th.addEventListener("click",function(){
if(sortCol===i)sortDir=-sortDir;else{sortCol=i;sortDir=1;}
Array.prototype.forEach.call(htr.children,function(h){h.removeAttribute("aria-sort");});
th.setAttribute("aria-sort",sortDir>0?"ascending":"descending");render();});htr.appendChild(th);});
thead.appendChild(htr);table.appendChild(thead);table.appendChild(tbody);wrap.appendChild(table);host.appendChild(wrap);
var more=el("div","more");host.appendChild(more);
var texts=rows.map(function(r){return r.map(function(v,i){return show(cols[i].kind,v);}).join(" \u0001 ").toLowerCase();});
function render(){var q=input?input.value.trim().toLowerCase():"",st=select?select.value:"";
var idx=order.filter(function(i){if(st&&String(rows[i][statusCol])!==st)return false;
return !q||texts[i].indexOf(q)>=0;});
if(sortCol>=0)idx.sort(function(a,b){return sortDir*cmp(rows[a][sortCol],rows[b][sortCol])||a-b;});
tbody.textContent="";var frag=document.createDocumentFragment(),n=Math.min(idx.length,shown);
for(var k=0;k<n;k++){var r=rows[idx[k]],tr=el("tr");tr.setAttribute("data-row",String(idx[k]));
for(var j=0;j<cols.length;j++){var c=cols[j],v=r[j],cls="";
if(c.kind==="bytes"||c.kind==="sbytes"||c.kind==="seconds"||c.kind==="num")cls="num";
else if(c.kind==="code")cls="code";
else if(c.kind==="status")cls="st st-"+(STATUS.indexOf(String(v))>=0?String(v):"other");
tr.appendChild(el("td",cls,show(c.kind,v)));}frag.appendChild(tr);}
tbody.appendChild(frag);count.textContent=(idx.length===rows.length?rows.length+" rows":idx.length+" of "+rows.length+" rows");
more.textContent="";if(idx.length>n){more.appendChild(document.createTextNode("showing the first "+n+" of "+idx.length+" "));
var b=el("button","","show all");b.addEventListener("click",function(){shown=Infinity;render();});more.appendChild(b);}}
if(input)input.addEventListener("input",function(){shown=limit;render();});
if(select)select.addEventListener("change",function(){shown=limit;render();});
render();host.setAttribute("data-ready","1");}
Array.prototype.forEach.call(document.querySelectorAll("[data-table]"),build);
window.tgReadyMs=performance.now();document.body.setAttribute("data-ready","1");
})();
"""
