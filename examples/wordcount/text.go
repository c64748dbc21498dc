package main

// builtinText is the input when no --input-file is given: a few paragraphs
// repeated, so that words reach counts in the thousands and a run takes
// several checkpoints.
const builtinText = `It was the best of times, it was the worst of times, it was the age of
wisdom, it was the age of foolishness, it was the epoch of belief, it was the
epoch of incredulity, it was the season of Light, it was the season of
Darkness, it was the spring of hope, it was the winter of despair, we had
everything before us, we had nothing before us, we were all going direct to
Heaven, we were all going direct the other way.
There were a king with a large jaw and a queen with a plain face, on the
throne of England; there were a king with a large jaw and a queen with a fair
face, on the throne of France. In both countries it was clearer than crystal
to the lords of the State preserves of loaves and fishes, that things in
general were settled for ever.
A split is a portion of the input that one reader reads from start to finish.
The enumerator hands splits to readers, the readers report their progress in
every checkpoint, and a sink commits its transaction only when the checkpoint
that covers it is complete. Nothing is lost and nothing is read twice.
`

// builtinRepeats is how often builtinText is written to the input topic.
const builtinRepeats = 5000
