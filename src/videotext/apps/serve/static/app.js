// videotext search page: query -> /search -> grid of thumbnails; click plays the clip
// from its start time (media fragment #t=start,end plus currentTime for seeking), or, for a hit
// found by what is said or written on screen, from the matched line's time (shown under the thumbnail).
// With "moments" ticked the hits are spans of videos (/search?moments=true): each card shows the span
// on a bar the length of its video, and a click plays the video from the span's start.
// A server bound beyond loopback needs an access token: the page asks for it once, keeps it
// for this tab (sessionStorage) and sends it as "Authorization: Bearer TOKEN"; thumbnails and
// videos are then fetched with that header and shown from blob URLs.
"use strict";
const TOKEN_KEY = "videotext-token";
const form = document.getElementById("search-form");
const queryBox = document.getElementById("query");
const whereBox = document.getElementById("where");
const kBox = document.getElementById("k");
const byBox = document.getElementById("by");
const momentsBox = document.getElementById("moments");
const statusLine = document.getElementById("status");
const grid = document.getElementById("results");
const playerBox = document.getElementById("player-box");
const player = document.getElementById("player");
const nowPlaying = document.getElementById("now-playing");

function authHeaders() {
  const token = sessionStorage.getItem(TOKEN_KEY);
  return token ? { Authorization: `Bearer ${token}` } : {};
}

// fetch with the tab's token; on 401 ask for the token (once per failure) and try again
async function api(url) {
  let response = await fetch(url, { headers: authHeaders() });
  if (response.status === 401) {
    const token = window.prompt("This videotext server needs its access token:");
    if (token) {
      sessionStorage.setItem(TOKEN_KEY, token.trim());
      response = await fetch(url, { headers: authHeaders() });
    }
  }
  return response;
}

// a URL the page can put in <img>/<video>: the file itself, or a blob fetched with the token
async function mediaUrl(url) {
  if (!sessionStorage.getItem(TOKEN_KEY)) return url;
  const response = await api(url);
  if (!response.ok) throw new Error(`${response.status} ${response.statusText}`);
  return URL.createObjectURL(await response.blob());
}

function seconds(t) {
  if (t === null || t === undefined) return "";
  const m = Math.floor(t / 60), s = (t - 60 * m).toFixed(1);
  return `${m}:${s.padStart(4, "0")}`;
}

function setStatus(text, isError) {
  statusLine.textContent = text;
  statusLine.classList.toggle("error", Boolean(isError));
}

async function play(hit) {
  if (!hit.video) { setStatus(`no playable file for ${hit.id}`, true); return; }
  // a hit found by what is said or written plays from its line; otherwise from the clip's start
  const line = matchedLine(hit);
  const start = line ? line.start : (hit.start || 0);
  const range = !line && hit.end !== null && hit.end !== undefined ? `${start},${hit.end}` : `${start}`;
  let source;
  try {
    source = await mediaUrl(hit.video);
  } catch (err) {
    setStatus(`could not load ${hit.id}: ${err.message}`, true);
    return;
  }
  playerBox.hidden = false;
  player.dataset.id = hit.id;
  player.dataset.start = String(start);
  player.src = `${source}#t=${range}`;
  player.addEventListener("loadedmetadata", () => {
    if (Math.abs(player.currentTime - start) > 0.05) player.currentTime = start;
    player.play().catch(() => {});  // autoplay may be blocked; the controls remain
  }, { once: true });
  nowPlaying.textContent = line
    ? `${hit.id}  from ${seconds(line.start)}: “${line.text}”  score ${hit.score.toFixed(3)}`
    : `${hit.id}  ${seconds(hit.start)}–${seconds(hit.end)}  score ${hit.score.toFixed(3)}`;
}

// the line a hit was found by: what is said first, else what is written on screen
function matchedLine(hit) {
  return hit.said || hit.written || null;
}

function card(hit) {
  const button = document.createElement("button");
  button.type = "button";
  button.className = "card";
  button.dataset.id = hit.id;
  button.title = hit.caption || hit.id;
  const img = document.createElement("img");
  mediaUrl(hit.thumbnail).then(url => { img.src = url; }, () => { img.alt = `no thumbnail for ${hit.id}`; });
  img.alt = hit.caption || hit.id;
  img.loading = "lazy";
  const meta = document.createElement("div");
  meta.className = "meta";
  const id = document.createElement("span");
  id.className = "id";
  id.textContent = `${hit.rank}. ${hit.id}`;
  const score = document.createElement("span");
  score.className = "score";
  score.textContent = hit.score.toFixed(3);
  meta.append(id, score);
  const time = document.createElement("div");
  time.className = "time";
  time.textContent = hit.start !== null ? `${seconds(hit.start)} – ${seconds(hit.end)}` : "whole video";
  button.append(img, meta, time);
  const bar = spanBar(hit);
  if (bar) button.append(bar);
  for (const [kind, line] of [["said", hit.said], ["written", hit.written]]) {
    if (!line) continue;
    const text = document.createElement("div");
    text.className = kind;
    text.textContent = `${kind === "written" ? "on screen " : ""}${seconds(line.start)} “${line.text}”`;
    button.append(text);
  }
  button.addEventListener("click", () => play(hit));
  return button;
}

// where a hit lies in its video: a bar the video's length with the hit's span marked
function spanBar(hit) {
  if (!hit.duration || hit.start === null || hit.end === null) return null;
  const bar = document.createElement("div");
  bar.className = "span-bar";
  bar.title = `${seconds(hit.start)} – ${seconds(hit.end)} of ${seconds(hit.duration)}`;
  const span = document.createElement("div");
  span.className = "span";
  const left = Math.min(100, Math.max(0, 100 * hit.start / hit.duration));
  span.style.left = `${left}%`;
  span.style.width = `${Math.max(1, Math.min(100 - left, 100 * (hit.end - hit.start) / hit.duration))}%`;
  bar.append(span);
  return bar;
}

// "more like this" under each result: the entries most like it (GET /search/like?id=…)
function withMoreLike(cardButton, hit) {
  const box = document.createElement("div");
  box.className = "hit";
  const more = document.createElement("button");
  more.type = "button";
  more.className = "more-like";
  more.dataset.id = hit.id;
  more.textContent = "more like this";
  const like = hit.entry || hit.id;  // a moment: like the indexed entry it was found through
  more.addEventListener("click", () => {
    const k = Math.min(100, Math.max(1, parseInt(kBox.value, 10) || 12));
    history.replaceState(null, "", `?like=${encodeURIComponent(like)}&k=${k}`);
    showResults(`/search/like?${new URLSearchParams({ id: like, k: String(k) })}`);
  });
  box.append(cardButton, more);
  return box;
}

async function search(q, k, where, by, moments) {
  const params = new URLSearchParams({ q, k: String(k), by });
  if (where) params.set("where", where);
  if (moments) params.set("moments", "true");
  return showResults(`/search?${params}`);
}

async function showResults(url) {
  setStatus("searching…");
  let response;
  try {
    response = await api(url);
  } catch (err) {
    setStatus(`network error: ${err}`, true);
    return;
  }
  const body = await response.json().catch(() => ({}));
  if (!response.ok) {
    const detail = Array.isArray(body.detail) ? body.detail.map(d => d.msg).join("; ") : body.detail;
    setStatus(`error ${response.status}: ${detail || response.statusText}`, true);
    return;
  }
  grid.replaceChildren(...body.results.map(hit => withMoreLike(card(hit), hit)));
  setStatus(`${body.results.length} results for “${body.query}”`);
}

form.addEventListener("submit", event => {
  event.preventDefault();
  const q = queryBox.value.trim();
  if (!q) { setStatus("type a query", true); return; }
  const k = Math.min(100, Math.max(1, parseInt(kBox.value, 10) || 12));
  const where = whereBox.value.trim();
  const filter = where ? `&where=${encodeURIComponent(where)}` : "";
  const by = byBox.value;
  const moments = momentsBox.checked;
  history.replaceState(null, "", `?q=${encodeURIComponent(q)}&k=${k}&by=${by}${filter}${moments ? "&moments=true" : ""}`);
  search(q, k, where, by, moments);
});

const initial = new URLSearchParams(location.search);
if (initial.get("q")) {
  queryBox.value = initial.get("q");
  if (initial.get("k")) kBox.value = initial.get("k");
  if (initial.get("where")) whereBox.value = initial.get("where");
  if (["all", "shown", "said", "written", "both"].includes(initial.get("by"))) byBox.value = initial.get("by");
  momentsBox.checked = initial.get("moments") === "true";
  form.requestSubmit();
} else if (initial.get("like")) {
  if (initial.get("k")) kBox.value = initial.get("k");
  const k = Math.min(100, Math.max(1, parseInt(kBox.value, 10) || 12));
  showResults(`/search/like?${new URLSearchParams({ id: initial.get("like"), k: String(k) })}`);
}
