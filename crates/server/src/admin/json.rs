//! JSON as ZooKeeper's AdminServer prints it: Jackson's default pretty printer (`"key" : value`,
//! two-space indentation per object level, arrays on one line as `[ a, b ]`, empty ones `[ ]`
//! and `{ }`), keys in insertion order.

use std::io;

use serde::Serialize;
use serde_json::ser::Formatter;
use serde_json::Value;

/// `value` in Jackson's pretty form.
pub fn to_jackson(value: &Value) -> String {
    let mut out = Vec::new();
    let mut ser = serde_json::Serializer::with_formatter(&mut out, Jackson::default());
    // Writing a `Value` into a Vec cannot fail.
    let _ = value.serialize(&mut ser);
    String::from_utf8(out).unwrap_or_default()
}

/// The state of Jackson's `DefaultPrettyPrinter`: how deep we are, and whether the innermost
/// object has a key yet.
#[derive(Default)]
struct Jackson {
    depth: usize,
    object_has_keys: Vec<bool>,
}

impl Jackson {
    fn newline_indent<W: ?Sized + io::Write>(&self, w: &mut W) -> io::Result<()> {
        w.write_all(b"\n")?;
        for _ in 0..self.depth {
            w.write_all(b"  ")?;
        }
        Ok(())
    }
}

impl Formatter for Jackson {
    // Arrays are inline (Jackson's FixedSpaceIndenter): they add no indentation level.
    fn begin_array<W: ?Sized + io::Write>(&mut self, w: &mut W) -> io::Result<()> {
        w.write_all(b"[")
    }

    fn end_array<W: ?Sized + io::Write>(&mut self, w: &mut W) -> io::Result<()> {
        w.write_all(b" ]")
    }

    fn begin_array_value<W: ?Sized + io::Write>(&mut self, w: &mut W, first: bool) -> io::Result<()> {
        w.write_all(if first { b" " } else { b", " })
    }

    fn end_array_value<W: ?Sized + io::Write>(&mut self, _w: &mut W) -> io::Result<()> {
        Ok(())
    }

    fn begin_object<W: ?Sized + io::Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.depth += 1;
        self.object_has_keys.push(false);
        w.write_all(b"{")
    }

    fn end_object<W: ?Sized + io::Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.depth -= 1;
        match self.object_has_keys.pop() {
            Some(true) => {
                self.newline_indent(w)?;
                w.write_all(b"}")
            }
            _ => w.write_all(b" }"),
        }
    }

    fn begin_object_key<W: ?Sized + io::Write>(&mut self, w: &mut W, first: bool) -> io::Result<()> {
        if let Some(has) = self.object_has_keys.last_mut() {
            *has = true;
        }
        if !first {
            w.write_all(b",")?;
        }
        self.newline_indent(w)
    }

    fn begin_object_value<W: ?Sized + io::Write>(&mut self, w: &mut W) -> io::Result<()> {
        w.write_all(b" : ")
    }

    fn end_object_value<W: ?Sized + io::Write>(&mut self, _w: &mut W) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn prints_as_jacksons_default_pretty_printer() {
        let v = json!({
            "connections": [{"remote_socket_address": "127.0.0.1:44908", "interest_ops": 1}],
            "secure_connections": [],
            "empty": {},
            "list": [1, 2],
            "command": "connections",
            "error": null
        });
        let want = "{\n  \"connections\" : [ {\n    \"remote_socket_address\" : \"127.0.0.1:44908\",\n    \
                    \"interest_ops\" : 1\n  } ],\n  \"secure_connections\" : [ ],\n  \"empty\" : { },\n  \
                    \"list\" : [ 1, 2 ],\n  \"command\" : \"connections\",\n  \"error\" : null\n}";
        assert_eq!(to_jackson(&v), want);
    }
}
