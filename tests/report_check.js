// Checks a fathom HTML report in the layout the browser gave it, and appends the verdict to the
// page in a pre element with id verdict: "PASS" and what was checked, or "FAIL" and one line per
// problem, then "END".
// report_check.sh injects this script (after `const expectedSweeps = N;`) into a copy of the report.
window.addEventListener("load", () => {
  const problems = [];
  const notes = [];
  const squash = (s) => s.replace(/\s+/g, "");
  const inside = (inner, outer) =>
    inner.left >= outer.left - 0.5 && inner.right <= outer.right + 0.5 &&
    inner.top >= outer.top - 0.5 && inner.bottom <= outer.bottom + 0.5;

  // The sweeps as the report names them: the first column of its first table.
  const overview = document.querySelector("table");
  const labels = Array.from(overview.querySelectorAll("tr")).slice(1).map((tr) => tr.cells[0].textContent);
  if (labels.length !== expectedSweeps) {
    problems.push(`overview lists ${labels.length} sweeps, expected ${expectedSweeps}`);
  }
  if (new Set(labels).size !== labels.length) problems.push(`overview labels repeat: ${labels.join(" | ")}`);

  // The opening: a headline per sweep, then the frontier plot, then the assumptions, all before
  // the first table.
  const first = document.querySelector("h1").nextElementSibling;
  if (!first || !first.matches("ul.headline")) problems.push("the report does not open with its headline");
  else if (first.querySelectorAll("li").length !== expectedSweeps) {
    problems.push(`the headline has ${first.querySelectorAll("li").length} entries, expected ${expectedSweeps}`);
  }
  const before = (a, b) => a && b && (a.compareDocumentPosition(b) & Node.DOCUMENT_POSITION_FOLLOWING) !== 0;
  const assumptions = Array.from(document.querySelectorAll("h2")).find((h) => h.textContent === "Assumptions");
  if (!before(document.querySelector("svg"), document.querySelector("table"))) problems.push("no plot above the tables");
  if (!before(assumptions, document.querySelector("table"))) problems.push("no assumptions above the tables");

  const svgs = Array.from(document.querySelectorAll("svg"));
  if (svgs.length === 0) problems.push("no plot");
  svgs.forEach((svg, n) => {
    const name = `plot ${n + 1} (${svg.querySelector("text").textContent})`;
    const box = svg.getBoundingClientRect();
    for (const axis of ["x-label", "y-label"]) {
      const label = svg.querySelector(`text.${axis}`);
      if (!label || label.textContent.trim() === "") problems.push(`${name}: no ${axis}`);
    }
    for (const text of svg.querySelectorAll("text")) {
      if (!inside(text.getBoundingClientRect(), box)) {
        problems.push(`${name}: text "${text.textContent}" overflows the plot`);
      }
    }
    // Legend: one entry per sweep, in order, each naming its sweep in full, none alike, none
    // overlapping another; the sweep with nothing valid says so.
    const entries = Array.from(svg.querySelectorAll("g.legend"));
    const shown = entries.map((g) => Array.from(g.querySelectorAll("tspan")).map((t) => t.textContent).join(" "));
    if (entries.length !== labels.length) {
      problems.push(`${name}: ${entries.length} legend entries for ${labels.length} sweeps`);
    }
    if (new Set(shown).size !== shown.length) problems.push(`${name}: legend entries alike: ${shown.join(" | ")}`);
    shown.forEach((text, i) => {
      if (i < labels.length && !squash(text).startsWith(squash(labels[i]))) {
        problems.push(`${name}: legend entry "${text}" does not name sweep "${labels[i]}"`);
      }
    });
    for (let i = 1; i < entries.length; ++i) {
      if (entries[i].getBoundingClientRect().top < entries[i - 1].getBoundingClientRect().bottom - 0.5) {
        problems.push(`${name}: legend entries "${shown[i - 1]}" and "${shown[i]}" overlap`);
      }
    }
    if (!shown.some((text) => squash(text).includes("(novalidcandidate)"))) {
      problems.push(`${name}: no legend entry says a sweep has no valid candidate`);
    }
    // Markers of different series at one point differ in shape, so neither hides the other.
    const seen = new Map();
    for (const m of svg.querySelectorAll(".marker[stroke]")) {
      const b = m.getBoundingClientRect();
      const key = `${Math.round(b.x + b.width / 2)},${Math.round(b.y + b.height / 2)}`;
      const shape = m.tagName + (m.getAttribute("d") || "").replace(/[-0-9.]+/g, "");
      const other = seen.get(key);
      if (other && other.group !== m.parentNode && other.shape === shape) {
        problems.push(`${name}: two series' markers hide each other at ${key}`);
      }
      seen.set(key, {group: m.parentNode, shape: shape});
    }
    notes.push(`${name}: ${entries.length} legend entries: ${shown.join(" | ")}`);
  });

  // Nothing wider than the page: tables, their cells, preformatted blocks, the page itself.
  const page = document.documentElement.clientWidth;
  for (const el of document.querySelectorAll("table, td, th, pre")) {
    if (el.getBoundingClientRect().right > page + 0.5 || el.scrollWidth > el.clientWidth + 1) {
      problems.push(`<${el.tagName.toLowerCase()}> "${el.textContent.slice(0, 40)}" overflows`);
    }
  }
  if (document.documentElement.scrollWidth > page) problems.push("the page scrolls sideways");

  const verdict = document.createElement("pre");
  verdict.id = "verdict";
  verdict.textContent = (problems.length === 0 ? "PASS\n" : "FAIL\n" + problems.join("\n") + "\n") +
                        notes.join("\n") + "\nEND\n";
  document.body.appendChild(verdict);
});
