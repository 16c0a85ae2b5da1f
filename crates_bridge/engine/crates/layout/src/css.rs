//! CSS values and the inputs/outputs of the width algorithms.

/// A computed length-percentage-or-auto value, as found in the corpus
/// (`"auto"`, `"<n>px"`, `"<n>%"`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Len {
    Auto,
    Px(f64),
    Percent(f64),
}

impl Len {
    /// Parse `auto`, `<n>px` or `<n>%`.
    pub fn parse(text: &str) -> Result<Len, String> {
        let t = text.trim();
        if t == "auto" {
            return Ok(Len::Auto);
        }
        let (num, unit) = if let Some(n) = t.strip_suffix("px") {
            (n, "px")
        } else if let Some(n) = t.strip_suffix('%') {
            (n, "%")
        } else if t == "0" {
            ("0", "px")
        } else {
            return Err(format!("`{text}` is not auto, <n>px or <n>%"));
        };
        let v: f64 = num
            .trim()
            .parse()
            .map_err(|_| format!("`{text}`: `{num}` is not a number"))?;
        if !v.is_finite() {
            return Err(format!("`{text}` is not finite"));
        }
        Ok(if unit == "px" { Len::Px(v) } else { Len::Percent(v) })
    }

    pub fn is_auto(&self) -> bool {
        matches!(self, Len::Auto)
    }

    /// The used value in px against the containing block's width; `None` for auto.
    pub fn resolve(&self, cb_width: f64) -> Option<f64> {
        match *self {
            Len::Auto => None,
            Len::Px(v) => Some(v),
            Len::Percent(p) => Some(cb_width * p / 100.0),
        }
    }

    /// The used value, with auto taken as zero (padding and borders are never auto).
    pub fn or_zero(&self, cb_width: f64) -> f64 {
        self.resolve(cb_width).unwrap_or(0.0)
    }
}

/// CSS 2.1 §10.3.3: a block-level, non-replaced element in normal flow (ltr).
#[derive(Clone, Debug, PartialEq)]
pub struct BlockWidthInput {
    pub cb_width: f64,
    pub width: Len,
    pub margin_left: Len,
    pub margin_right: Len,
    pub padding_left: Len,
    pub padding_right: Len,
    pub border_left: f64,
    pub border_right: f64,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BlockWidthOutput {
    pub width: f64,
    pub margin_left: f64,
    pub margin_right: f64,
}

/// CSS 2.1 §10.3.7: an absolutely positioned, non-replaced element, horizontally (ltr).
/// The static position's left is 0; the element's content is one block of
/// `content_width`, so its shrink-to-fit preferred and minimum widths equal it.
#[derive(Clone, Debug, PartialEq)]
pub struct AbsposWidthInput {
    pub cb_width: f64,
    pub left: Len,
    pub right: Len,
    pub width: Len,
    pub margin_left: Len,
    pub margin_right: Len,
    pub padding_left: Len,
    pub padding_right: Len,
    pub border_left: f64,
    pub border_right: f64,
    pub content_width: f64,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AbsposWidthOutput {
    pub left: f64,
    pub width: f64,
    pub margin_left: f64,
    pub margin_right: f64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_auto_px_and_percent() {
        assert_eq!(Len::parse("auto"), Ok(Len::Auto));
        assert_eq!(Len::parse("12.5px"), Ok(Len::Px(12.5)));
        assert_eq!(Len::parse("-3px"), Ok(Len::Px(-3.0)));
        assert_eq!(Len::parse("50%"), Ok(Len::Percent(50.0)));
        assert!(Len::parse("3em").is_err());
        assert!(Len::parse("px").is_err());
    }

    #[test]
    fn percent_resolves_against_the_containing_block() {
        assert_eq!(Len::Percent(25.0).resolve(400.0), Some(100.0));
        assert_eq!(Len::Auto.resolve(400.0), None);
        assert_eq!(Len::Auto.or_zero(400.0), 0.0);
    }
}
