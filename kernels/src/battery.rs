//! Gate battery (placeholder until the battery lands).
