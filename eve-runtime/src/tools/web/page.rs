//! What `web_fetch` makes of an HTML page: its title and its readable part as Markdown.
//!
//! The page is parsed by html5ever (through `htmd`, which also writes the Markdown). The part
//! kept is the page's `<main>`, else its first `<article>`, else its `<body>`; scripts, styles,
//! forms, navigation, asides and footers are left out (and a page-level `<header>` when the whole
//! body is kept), so what the model reads is the text a person would.

use std::rc::Rc;

use htmd::options::{BulletListMarker, Options};
use htmd::{HtmlToMarkdown, Node};
use markup5ever_rcdom::NodeData;
use reqwest::Url;

/// Tags never converted: code, styling, widgets and page furniture.
const SKIPPED: &[&str] = &[
    "script", "style", "noscript", "template", "iframe", "svg", "canvas", "form", "button",
    "input", "select", "textarea", "nav", "aside", "footer", "dialog",
];

/// A page converted for the model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Page {
    /// The text of `<title>`, when it has one.
    pub(crate) title: Option<String>,
    /// The readable part, as Markdown.
    pub(crate) markdown: String,
}

/// Converts an HTML document to its title and readable Markdown, its links made absolute
/// against `base` (the page's URL) so the model can fetch them.
pub(crate) fn to_markdown(html: &str, base: Option<&Url>) -> Page {
    let parser = converter(false);
    let Ok(document) = parser.html_to_tree(html) else {
        return Page {
            title: None,
            markdown: html.to_owned(),
        };
    };
    if let Some(base) = base {
        absolute_links(&document, base);
    }
    let title = find(&document, &|n| is(n, "title"))
        .map(|t| squeeze(&text_of(&t)))
        .filter(|t| !t.is_empty());
    let (root, whole_body) = match find(&document, &|n| is(n, "main"))
        .or_else(|| find(&document, &|n| is(n, "article")))
    {
        Some(part) => (part, false),
        None => (
            find(&document, &|n| is(n, "body")).unwrap_or_else(|| document.clone()),
            true,
        ),
    };
    let markdown = if whole_body {
        converter(true).tree_to_markdown(&root)
    } else {
        parser.tree_to_markdown(&root)
    };
    Page {
        title,
        markdown: tidy(&markdown),
    }
}

fn converter(skip_header: bool) -> HtmlToMarkdown {
    let mut skipped = SKIPPED.to_vec();
    if skip_header {
        skipped.push("header");
    }
    HtmlToMarkdown::builder()
        .options(Options {
            bullet_list_marker: BulletListMarker::Dash,
            ul_bullet_spacing: 1,
            ol_number_spacing: 1,
            ..Options::default()
        })
        .skip_tags(skipped)
        .build()
}

/// Rewrites every `<a href>` and `<img src>` under `node` to an absolute URL.
fn absolute_links(node: &Rc<Node>, base: &Url) {
    let mut stack = vec![node.clone()];
    while let Some(n) = stack.pop() {
        if let NodeData::Element { name, attrs, .. } = &n.data {
            let key = match &*name.local {
                "a" => Some("href"),
                "img" => Some("src"),
                _ => None,
            };
            if let Some(key) = key {
                for attr in attrs.borrow_mut().iter_mut() {
                    if &*attr.name.local == key
                        && let Ok(joined) = base.join(attr.value.trim())
                    {
                        attr.value = String::from(joined).into();
                    }
                }
            }
        }
        let children = n.children.borrow();
        stack.extend(children.iter().rev().cloned());
    }
}

/// Whether `node` is the element `tag`.
fn is(node: &Rc<Node>, tag: &str) -> bool {
    matches!(&node.data, NodeData::Element { name, .. } if &*name.local == tag)
}

/// The first node under `node` (itself included), in document order, that `pred` accepts.
fn find(node: &Rc<Node>, pred: &dyn Fn(&Rc<Node>) -> bool) -> Option<Rc<Node>> {
    let mut stack = vec![node.clone()];
    while let Some(n) = stack.pop() {
        if pred(&n) {
            return Some(n);
        }
        let children = n.children.borrow();
        stack.extend(children.iter().rev().cloned());
    }
    None
}

/// The text under `node`.
fn text_of(node: &Rc<Node>) -> String {
    let mut out = String::new();
    let mut stack = vec![node.clone()];
    while let Some(n) = stack.pop() {
        if let NodeData::Text { contents } = &n.data {
            out.push_str(&contents.borrow());
        }
        let children = n.children.borrow();
        stack.extend(children.iter().rev().cloned());
    }
    out
}

/// Whitespace runs as one space, trimmed.
fn squeeze(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Trailing spaces dropped and blank lines kept to one in a row.
fn tidy(markdown: &str) -> String {
    let mut out = String::with_capacity(markdown.len());
    let mut blank = 0;
    for line in markdown.lines() {
        let line = line.trim_end();
        if line.is_empty() {
            blank += 1;
            if blank > 1 {
                continue;
            }
        } else {
            blank = 0;
        }
        out.push_str(line);
        out.push('\n');
    }
    out.trim().to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_article_is_kept_and_the_furniture_left_out() {
        let page = to_markdown(
            "<html><head><title> A  title </title><script>var x = 1;</script></head>\
             <body><nav><a href='/'>Home</a></nav><article><h1>Heading</h1>\
             <p>Some <b>bold</b> text.</p><ul><li>one</li><li>two</li></ul></article>\
             <footer>Copyright</footer></body></html>",
            None,
        );
        assert_eq!(page.title.as_deref(), Some("A title"));
        assert_eq!(
            page.markdown,
            "# Heading\n\nSome **bold** text.\n\n- one\n- two"
        );
    }

    #[test]
    fn a_page_without_an_article_keeps_its_body_without_its_header() {
        let page = to_markdown(
            "<body><header>Site</header><h2>Part</h2><p>Body text.</p><style>p{}</style></body>",
            None,
        );
        assert_eq!(page.title, None);
        assert_eq!(page.markdown, "## Part\n\nBody text.");
    }

    #[test]
    fn links_are_made_absolute_against_the_page() {
        let base = Url::parse("https://example.org/blog/post").ok();
        let page = to_markdown(
            "<p><a href='/about'>About</a> <a href='next'>Next</a> \
             <a href='https://other.example/x'>Other</a> <img src='img/a.png' alt='A'></p>",
            base.as_ref(),
        );
        assert_eq!(
            page.markdown,
            "[About](https://example.org/about) [Next](https://example.org/blog/next) \
             [Other](https://other.example/x) ![A](https://example.org/blog/img/a.png)"
        );
    }
}
