"""What the browser tests check on any page: WCAG contrast of what a person clicks, and axe-core's serious and
critical violations (axe-playwright-python's bundled axe.min.js: no network)."""

# The text colour against the first opaque background behind it (the element's own, then its ancestors').
CONTRAST_JS = """(el) => {
  const rgb = s => (s.match(/[\\d.]+/g) || []).map(Number);
  const lum = ([r, g, b]) => {
    const c = [r, g, b].map(v => { v /= 255; return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4); });
    return 0.2126 * c[0] + 0.7152 * c[1] + 0.0722 * c[2];
  };
  const fg = rgb(getComputedStyle(el).color);
  let bg = [255, 255, 255];
  for (let n = el; n && n.nodeType === 1; n = n.parentElement) {
    const c = rgb(getComputedStyle(n).backgroundColor);
    if (c.length === 3 || (c.length === 4 && c[3] > 0.9)) { bg = c.slice(0, 3); break; }
  }
  const [hi, lo] = [lum(fg), lum(bg)].sort((a, b) => b - a);
  return (hi + 0.05) / (lo + 0.05);
}"""

# Everything a person acts on: links, buttons, summaries.
ACTIONABLE = "a[href]:visible, button:visible, summary:visible, input[type=submit]:visible"


def contrast(locator):
    """The WCAG contrast ratio of one element's text."""
    return locator.evaluate(CONTRAST_JS)


# Every visible control's (text, ratio) in one round trip (a page of a few hundred links measured one by one cost
# seconds a page); visible as Playwright's :visible says it: a box of its own and not visibility:hidden.
ALL_CONTROLS_JS = (
    """(floor) => {
  const ratio = %s;
  const out = [];
  for (const el of document.querySelectorAll("a[href], button, summary, input[type=submit]")) {
    const box = el.getBoundingClientRect();
    if (!box.width || !box.height || getComputedStyle(el).visibility === "hidden") continue;
    const r = ratio(el);
    if (r < floor) out.push([(el.innerText || el.getAttribute("name") || "").trim().slice(0, 40), Math.round(r * 100) / 100]);
  }
  return out;
}"""
    % CONTRAST_JS
)


def low_contrast_controls(page, floor=4.5):
    """Each visible control under the floor, as (its text, its ratio)."""
    return [tuple(found) for found in page.evaluate(ALL_CONTROLS_JS, floor)]


def serious_violations(page):
    """axe-core's serious and critical violations on the page as it is now: (rule id, count of nodes, help)."""
    from axe_playwright_python.sync_playwright import Axe

    results = Axe().run(page)
    return [
        (v["id"], len(v["nodes"]), v["help"])
        for v in results.response["violations"]
        if v["impact"] in ("serious", "critical")
    ]
