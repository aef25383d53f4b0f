//! The HTML page around the SVG: the picture inline, the verdict as copyable text, a zoom
//! slider. No external resources.

use super::svg::svg_element;
use super::text::{esc, fmt_time};
use super::Timeline;
use std::fmt::Write as _;

/// The timeline as a standalone HTML page: the SVG inline (tooltips from its `<title>`s),
/// the verdict as copyable text (its evidence uncut), and a zoom slider. No external
/// resources.
pub fn render_html(timeline: &Timeline) -> String {
    let title = esc(&timeline.title);
    let mut out = String::new();
    put!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{title}</title>\n<style>{HTML_STYLE}</style></head>\n<body>\n"
    );
    put!(
        out,
        "<header><b>{title}</b> <label>zoom <input id=\"zoom\" type=\"range\" min=\"-4\" max=\"2\" step=\"0.1\" value=\"0\"></label> <span id=\"zv\">100%</span> <button id=\"fit\">fit width</button> <button id=\"one\">100%</button> <small>hover a bar or mark for details</small></header>\n"
    );
    if let Some(verdict) = &timeline.verdict {
        let spans: Vec<String> = verdict.spans.iter().map(|id| format!("#{id}")).collect();
        put!(
            out,
            "<details><summary>the verdict as text</summary><pre class=\"verdict\">invariant violated: {}\nat {}\nspans: {}\n{}</pre></details>\n",
            esc(&verdict.invariant),
            fmt_time(verdict.at_nanos),
            spans.join(", "),
            esc(&verdict.evidence)
        );
    }
    out.push_str("<div id=\"wrap\">");
    svg_element(&mut out, timeline);
    put!(
        out,
        "</div>\n<script>{HTML_SCRIPT}</script>\n</body></html>\n"
    );
    out
}

const HTML_STYLE: &str = "body{margin:0;font:14px sans-serif;background:#fafafa}\
header{position:sticky;top:0;left:0;z-index:1;background:#fff;padding:6px 12px;border-bottom:1px solid #ccc}\
header small{color:#777}#wrap{overflow:auto}#wrap svg{display:block;background:#fff}\
details{margin:4px 12px}pre.verdict{margin:4px 0;padding:8px;border:2px solid #e00;background:#fff0f0;white-space:pre-wrap}";

const HTML_SCRIPT: &str = "(function(){var s=document.querySelector('#wrap svg'),\
w=+s.getAttribute('width'),h=+s.getAttribute('height'),z=document.getElementById('zoom'),\
v=document.getElementById('zv');function set(f){s.setAttribute('width',w*f);\
s.setAttribute('height',h*f);v.textContent=Math.round(f*100)+'%';}\
z.oninput=function(){set(Math.pow(2,+z.value));};\
document.getElementById('fit').onclick=function(){var f=document.getElementById('wrap').clientWidth/w;\
z.value=Math.log2(f);set(f);};document.getElementById('one').onclick=function(){z.value=0;set(1);};})();";
