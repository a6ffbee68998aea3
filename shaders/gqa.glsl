// Grouped-query attention indexing, prepended to the shaders that read keys or values (scores,
// context): query head h reads key/value head h / (H / G). G = H is plain multi-head attention.
int kv_head(int h, int H, int G) { return h / (H / G); }
