//! An SVG backend for plotters that names what a plot draws: plotters' own `SVGBackend` writes
//! each shape, and the caller opens and closes `<g>` groups between draws
//! (`<g class="series" data-series="run">`), so a reader's tools, and the browser test, can
//! tell a data series from a band, the axes or the legend. The shapes are `SVGBackend`'s, byte
//! for byte: each is drawn by a fresh `SVGBackend` on a scratch string and moved into the
//! document.

use std::cell::RefCell;
use std::rc::Rc;

use plotters::prelude::*;
use plotters_backend::{
    BackendColor, BackendCoord, BackendStyle, BackendTextStyle, DrawingErrorKind,
};

use crate::model::util::html_escape;

type Drawn = Result<(), DrawingErrorKind<std::io::Error>>;

/// The document being drawn: its size and its body so far.
pub(super) struct SvgDoc {
    size: (u32, u32),
    body: Rc<RefCell<String>>,
}

impl SvgDoc {
    pub(super) fn new(size: (u32, u32)) -> SvgDoc {
        SvgDoc {
            size,
            body: Rc::new(RefCell::new(String::new())),
        }
    }

    /// A backend that draws into this document.
    pub(super) fn backend(&self) -> GroupedSvg {
        GroupedSvg {
            size: self.size,
            body: Rc::clone(&self.body),
        }
    }

    /// Open `<g class="CLASS" data-series="NAME">`: what is drawn until [`SvgDoc::close`] is in
    /// it.
    pub(super) fn open(&self, class: &str, name: Option<&str>) {
        let mut body = self.body.borrow_mut();
        body.push_str(&format!("<g class=\"{}\"", html_escape(class)));
        if let Some(n) = name {
            body.push_str(&format!(" data-series=\"{}\"", html_escape(n)));
        }
        body.push_str(">\n");
    }

    pub(super) fn close(&self) {
        self.body.borrow_mut().push_str("</g>\n");
    }

    /// The whole SVG document.
    pub(super) fn finish(self) -> String {
        let (w, h) = self.size;
        format!(
            "<svg width=\"{w}\" height=\"{h}\" viewBox=\"0 0 {w} {h}\" \
             xmlns=\"http://www.w3.org/2000/svg\">\n{}</svg>\n",
            self.body.borrow()
        )
    }
}

/// The drawing backend of an [`SvgDoc`].
pub(super) struct GroupedSvg {
    size: (u32, u32),
    body: Rc<RefCell<String>>,
}

impl GroupedSvg {
    /// Draw with a scratch `SVGBackend` and append what it wrote between its `<svg>` and
    /// `</svg>` lines.
    fn emit(&mut self, draw: impl FnOnce(&mut SVGBackend) -> Drawn) -> Drawn {
        let mut scratch = String::new();
        {
            let mut svg = SVGBackend::with_string(&mut scratch, self.size);
            draw(&mut svg)?;
            svg.present()?;
        }
        let shapes = scratch.split_once('\n').map_or("", |(_, rest)| rest);
        let shapes = shapes.strip_suffix("</svg>\n").unwrap_or(shapes);
        self.body.borrow_mut().push_str(shapes);
        Ok(())
    }
}

impl DrawingBackend for GroupedSvg {
    type ErrorType = std::io::Error;

    fn get_size(&self) -> (u32, u32) {
        self.size
    }

    fn ensure_prepared(&mut self) -> Drawn {
        Ok(())
    }

    fn present(&mut self) -> Drawn {
        Ok(())
    }

    fn draw_pixel(&mut self, point: BackendCoord, color: BackendColor) -> Drawn {
        self.emit(|b| b.draw_pixel(point, color))
    }

    fn draw_line<S: BackendStyle>(
        &mut self,
        from: BackendCoord,
        to: BackendCoord,
        style: &S,
    ) -> Drawn {
        self.emit(|b| b.draw_line(from, to, style))
    }

    fn draw_rect<S: BackendStyle>(
        &mut self,
        upper_left: BackendCoord,
        bottom_right: BackendCoord,
        style: &S,
        fill: bool,
    ) -> Drawn {
        self.emit(|b| b.draw_rect(upper_left, bottom_right, style, fill))
    }

    fn draw_path<S: BackendStyle, I: IntoIterator<Item = BackendCoord>>(
        &mut self,
        path: I,
        style: &S,
    ) -> Drawn {
        self.emit(|b| b.draw_path(path, style))
    }

    fn draw_circle<S: BackendStyle>(
        &mut self,
        center: BackendCoord,
        radius: u32,
        style: &S,
        fill: bool,
    ) -> Drawn {
        self.emit(|b| b.draw_circle(center, radius, style, fill))
    }

    fn fill_polygon<S: BackendStyle, I: IntoIterator<Item = BackendCoord>>(
        &mut self,
        vert: I,
        style: &S,
    ) -> Drawn {
        self.emit(|b| b.fill_polygon(vert, style))
    }

    fn draw_text<S: BackendTextStyle>(
        &mut self,
        text: &str,
        style: &S,
        pos: BackendCoord,
    ) -> Drawn {
        self.emit(|b| b.draw_text(text, style, pos))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_wrap_what_is_drawn_between_them() {
        let doc = SvgDoc::new((100, 50));
        {
            let root = doc.backend().into_drawing_area();
            root.fill(&WHITE).unwrap();
            doc.open("series", Some("run <1>"));
            root.draw(&PathElement::new(vec![(0, 0), (10, 10)], BLACK))
                .unwrap();
            doc.close();
        }
        let svg = doc.finish();
        assert!(svg.starts_with("<svg width=\"100\" height=\"50\""), "{svg}");
        assert!(svg.ends_with("</svg>\n"), "{svg}");
        let g = svg
            .find("<g class=\"series\" data-series=\"run &lt;1&gt;\">")
            .unwrap();
        let line = svg.find("<polyline").unwrap();
        assert!(svg.find("<rect").unwrap() < g && g < line, "{svg}");
        assert!(line < svg.find("</g>").unwrap(), "{svg}");
        assert_eq!(svg.matches("<svg").count(), 1, "{svg}");
    }
}
