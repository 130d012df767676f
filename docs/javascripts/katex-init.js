// Typesets the maths of every page with the site's own copy of KaTeX (assets/katex): the
// arithmatex spans of the Markdown pages (\( \), \[ \]) and the $ / $$ of the notebooks.
// A formula KaTeX cannot parse is logged as a console error, which `make docs-check` fails on
// (a :math: role renders a parse error in red instead: it is a docstring's own notation).
(function () {
  function render() {
    if (!window.renderMathInElement || document.body.dataset.katexDone) return;
    document.body.dataset.katexDone = "1";
    // Sphinx-style :math:`...` in a docstring arrives as the text ":math:" then <code>...</code>.
    document.querySelectorAll("code").forEach(function (code) {
      var prev = code.previousSibling;
      if (!prev || prev.nodeType !== 3 || !/:math:$/.test(prev.textContent)) return;
      prev.textContent = prev.textContent.replace(/:math:$/, "");
      var span = document.createElement("span");
      window.katex.render(code.textContent, span, { throwOnError: false });
      code.replaceWith(span);
    });
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
