
"use strict";
const $ = (id) => document.getElementById(id);
const statusLine = $("status"), errorBox = $("error"), result = $("result");
const gif = $("gif"), video = $("video"), fileInput = $("file"), drop = $("drop"), token = $("token");
const backgroundInput = $("background");
let run = 0; // bumped by every conversion, so a stale answer or poll is dropped
let previewURL = null;
let last = null; // the last conversion asked for, run again when the background changes

// The page's own background in the reader's scheme, unless they chose another.
const dark = window.matchMedia && window.matchMedia("(prefers-color-scheme: dark)").matches;
backgroundInput.value = dark ? "__DARK_BACKGROUND__" : "__LIGHT_BACKGROUND__";
function paintBackdrops() {
  for (const figure of document.querySelectorAll(".pair figure")) {
    figure.style.background = backgroundInput.value;
  }
}
paintBackdrops();
backgroundInput.addEventListener("change", () => {
  paintBackdrops();
  if (last) last();
});

try { token.value = localStorage.getItem("gif2mp4.token") || ""; } catch (_) {}
token.addEventListener("change", () => {
  try { localStorage.setItem("gif2mp4.token", token.value.trim()); } catch (_) {}
});

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const kb = (bytes) => (bytes / 1024).toFixed(1) + " KB";

function showError(error) {
  const code = document.createElement("strong");
  code.textContent = error.code || "error";
  errorBox.replaceChildren(code, ": " + (error.message || "something went wrong"));
  errorBox.hidden = false;
  statusLine.textContent = "";
}

async function apiError(response) {
  try {
    const body = await response.json();
    if (body && body.error && body.error.code) return body.error;
  } catch (_) {}
  return { code: "http-" + response.status, message: response.statusText || "the request failed" };
}

async function convert(body, contentType, preview) {
  last = () => convert(body, contentType, preview);
  const mine = ++run;
  errorBox.hidden = true;
  result.hidden = true;
  statusLine.textContent = "Converting…";
  const headers = { "Content-Type": contentType };
  if (token.value.trim()) headers.Authorization = "Bearer " + token.value.trim();
  try {
    const background = backgroundInput.value;
    let response;
    if (contentType === "application/json") {
      const fields = JSON.parse(body);
      fields.background = background;
      fields.formats = ["webp"];
      response = await fetch("/transcode", { method: "POST", headers, body: JSON.stringify(fields) });
    } else {
      const query = "?formats=webp&background=" + encodeURIComponent(background);
      response = await fetch("/transcode" + query, { method: "POST", headers, body });
    }
    let answer;
    if (response.status === 202) {
      // Slow conversions answer 202 with the job to poll.
      const job = response.headers.get("Location");
      const started = Date.now();
      for (;;) {
        await sleep(1000);
        if (mine !== run) return;
        statusLine.textContent = "Converting… " + Math.round((Date.now() - started) / 1000) + " s";
        response = await fetch(job, { cache: "no-store" });
        if (!response.ok) throw await apiError(response);
        const state = await response.json();
        if (state.status === "done") { answer = state.result; break; }
        if (state.status === "failed") throw state.error || { code: "failed", message: "conversion failed" };
      }
    } else if (!response.ok) {
      throw await apiError(response);
    } else {
      answer = await response.json();
    }
    if (mine === run) show(answer, preview);
  } catch (error) {
    if (mine !== run) return;
    const message = String((error && error.message) || error);
    showError(error && error.code ? error : { code: "network", message });
  }
}

function show(r, preview) {
  gif.src = preview;
  const webp = $("webp");
  for (const media of [gif, video, webp]) { media.width = r.sourceWidth; media.height = r.sourceHeight; }
  const webpEntry = (r.artifacts || []).find((a) => a.format === "webp");
  webp.src = r.webp || "";
  webp.closest("figure").hidden = !r.webp;
  $("webp-size").textContent = webpEntry
    ? kb(webpEntry.bytes) + (webpEntry.lossless ? ", lossless" : "")
      + (webpEntry.recommendation === "keep-gif" ? " (not smaller than the GIF)" : "")
    : "";
  video.loop = r.loopsForever;
  // A finite loop count is played by /player.js, as in the snippet.
  if (!r.loopsForever && r.playCount > 1) video.dataset.playCount = r.playCount;
  else delete video.dataset.playCount;
  video.muted = true;
  video.poster = r.poster;
  video.src = r.mp4;
  $("gif-size").textContent = kb(r.sourceBytes);
  $("mp4-size").textContent = kb(r.mp4Bytes);
  const plays = r.loopsForever ? "loops forever"
    : r.playCount > 1 ? "plays " + r.playCount + " times" : "plays once";
  $("duration").textContent = (r.durationMs / 1000).toFixed(2) + " s, " + plays;
  const saved = r.sourceBytes - r.mp4Bytes;
  $("saved").textContent = saved > 0
    ? kb(saved) + " (" + Math.round(saved * 100 / r.sourceBytes) + "%)"
    : "nothing: the MP4 is " + kb(-saved) + " larger";
  $("advice").textContent = (r.recommendation === "video" ? "Use the video." : "Keep the GIF.")
    + (r.truncated ? " The GIF is truncated; the frames before the break were kept." : "");
  $("snippet").value = r.html;
  $("copied").textContent = "";
  statusLine.textContent = "Done.";
  result.hidden = false;
  video.play().catch(() => {}); // autoplay may be refused; the poster stays
}

function convertFile(file) {
  if (!file) return;
  // The service tells the format by its signature; this only turns away what cannot be one.
  if (file.type && !/^image\/(gif|png|apng|webp)$/.test(file.type)) {
    showError({ code: "unsupported-format", message: file.name + " is not a GIF, APNG or WebP" });
    return;
  }
  if (previewURL) URL.revokeObjectURL(previewURL);
  previewURL = URL.createObjectURL(file);
  convert(file, file.type || "application/octet-stream", previewURL);
}

$("url-form").addEventListener("submit", (event) => {
  event.preventDefault();
  const url = $("url").value.trim();
  convert(JSON.stringify({ url }), "application/json", url);
});
fileInput.addEventListener("change", () => { convertFile(fileInput.files[0]); fileInput.value = ""; });
$("sample").addEventListener("click", async () => {
  try {
    const response = await fetch("/demo/sample.gif");
    if (!response.ok) throw await apiError(response);
    const blob = await response.blob();
    convertFile(new File([blob], "sample.gif", { type: "image/gif" }));
  } catch (error) {
    showError(error && error.code ? error : { code: "network", message: String(error) });
  }
});
drop.addEventListener("dragover", (event) => { event.preventDefault(); drop.classList.add("over"); });
drop.addEventListener("dragleave", () => drop.classList.remove("over"));
drop.addEventListener("drop", (event) => {
  event.preventDefault();
  drop.classList.remove("over");
  convertFile(event.dataTransfer.files[0]);
});
// A file dropped beside the zone would otherwise replace the page.
window.addEventListener("dragover", (event) => event.preventDefault());
window.addEventListener("drop", (event) => event.preventDefault());

$("copy").addEventListener("click", async () => {
  const snippet = $("snippet");
  let copied = true;
  try {
    await navigator.clipboard.writeText(snippet.value);
  } catch (_) {
    // No Clipboard API (an http: page on another host): select and use the older command.
    snippet.focus();
    snippet.select();
    copied = document.execCommand("copy");
  }
  $("copied").textContent = copied ? "Copied." : "Press Ctrl+C (⌘C) to copy.";
});
