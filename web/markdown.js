// Committed reply text -> HTML, with the vendored `marked` (web/vendor/, MIT, see
// marked.LICENSE.md). Model text is untrusted: raw HTML in it is shown as text, links keep only
// http(s)/mailto targets and open in a new tab without a referrer, and images are shown as links
// (nothing is fetched because a model wrote a URL).
import { Marked } from './vendor/marked.esm.js';

export function escapeHtml(s) {
  return String(s).replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]);
}

function safeHref(href) {
  const h = String(href || '').trim();
  return /^(https?:|mailto:)/i.test(h) ? h : null;
}

const md = new Marked({
  gfm: true,
  breaks: true,
  async: false,
  renderer: {
    html({ text }) { return escapeHtml(text); },
    link({ href, title, tokens }) {
      const inner = this.parser.parseInline(tokens);
      const h = safeHref(href);
      if (!h) return inner;
      const t = title ? ` title="${escapeHtml(title)}"` : '';
      return `<a href="${escapeHtml(h)}"${t} target="_blank" rel="noopener noreferrer nofollow">${inner}</a>`;
    },
    image({ href, text }) {
      const h = safeHref(href);
      const label = escapeHtml(text || href || 'image');
      return h ? `<a href="${escapeHtml(h)}" target="_blank" rel="noopener noreferrer nofollow">[${label}]</a>` : `[${label}]`;
    },
  },
});

// HTML for a (possibly partial) Markdown text. Never throws: on a parser failure the text is
// shown escaped.
export function renderMarkdown(text) {
  try {
    return md.parse(String(text ?? ''));
  } catch {
    return `<p>${escapeHtml(text)}</p>`;
  }
}
