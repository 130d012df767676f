// Typesets the maths of every page with the site's own copy of KaTeX (assets/katex): the
// arithmatex spans of the Markdown pages (\( \), \[ \]) and the $ / $$ of the notebooks.
// A formula KaTeX cannot parse is logged as a console error, which `make docs-check` fails on.
(function () {
  function render() {
    if (!window.renderMathInElement || document.body.dataset.katexDone) return;
    document.body.dataset.katexDone = "1";
    window.renderMathInElement(document.body, {
      delimiters: [
        { left: "$$", right: "$$", display: true },
        { left: "\\[", right: "\\]", display: true },
        { left: "\\(", right: "\\)", display: false },
        { left: "$", right: "$", display: false },
      ],
      ignoredClasses: ["highlight", "doc-signature"],
    });
  }
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", render);
  } else {
    render();
  }
})();
