"""The synthetic corpus's lexicon: names, nouns, adjectives, verbs, prepositions and pronouns with
their features (the rule baseline of ``aah_viz.probes`` reads ``PRONOUN_FEATURES`` too)."""

from __future__ import annotations

NAMES = {
    "m": ["Tom", "James", "Peter", "Omar", "Luca", "Felix", "Hugo", "Ivan", "Noah", "Samuel", "Victor", "Arthur"],
    "f": ["Anna", "Maria", "Emma", "Sofia", "Clara", "Lena", "Nora", "Alice", "Julia", "Rosa", "Mila", "Grace"],
}
GROUP_NOUNS = ["farmers", "sailors", "students", "teachers", "soldiers", "workers", "neighbours", "singers"]
THING_NOUNS = ["car", "boat", "house", "letter", "clock", "lamp", "machine", "garden", "bridge", "bicycle"]
ROLE_NOUNS = ["doctor", "teacher", "baker", "painter", "farmer", "writer", "pilot", "singer", "lawyer", "nurse"]
GENERIC_NOUNS = [
    ("dog", "dogs"),
    ("cat", "cats"),
    ("bird", "birds"),
    ("tree", "trees"),
    ("river", "rivers"),
    ("road", "roads"),
    ("window", "windows"),
    ("book", "books"),
    ("table", "tables"),
    ("apple", "apples"),
    ("stone", "stones"),
    ("horse", "horses"),
    ("flower", "flowers"),
    ("hill", "hills"),
    ("door", "doors"),
    ("box", "boxes"),
    ("cup", "cups"),
    ("key", "keys"),
    ("ship", "ships"),
    ("field", "fields"),
]
ADJECTIVES = [
    "old",
    "young",
    "small",
    "big",
    "red",
    "green",
    "quiet",
    "happy",
    "tall",
    "dark",
    "bright",
    "cold",
    "warm",
    "heavy",
    "strange",
    "little",
    "new",
    "busy",
    "gentle",
    "brave",
]
TRANSITIVE = [
    ("sees", "see"),
    ("likes", "like"),
    ("finds", "find"),
    ("takes", "take"),
    ("watches", "watch"),
    ("follows", "follow"),
    ("helps", "help"),
    ("paints", "paint"),
    ("visits", "visit"),
    ("carries", "carry"),
    ("calls", "call"),
    ("opens", "open"),
    ("moves", "move"),
    ("cleans", "clean"),
    ("remembers", "remember"),
]
INTRANSITIVE = [
    ("sleeps", "sleep"),
    ("runs", "run"),
    ("waits", "wait"),
    ("sings", "sing"),
    ("smiles", "smile"),
    ("walks", "walk"),
    ("works", "work"),
    ("rests", "rest"),
    ("laughs", "laugh"),
    ("arrives", "arrive"),
]
PLACE_PREPS = ["near", "behind", "under", "beside", "across", "over"]
MOTION_PREPS = ["to", "into", "from", "toward", "past"]
PRONOUNS = {  # class -> (subject, object, possessive)
    "m": ("he", "him", "his"),
    "f": ("she", "her", "her"),
    "pl": ("they", "them", "their"),
    "n": ("it", "it", "its"),
}
PRONOUN_FEATURES = {  # lower-cased pronoun -> (gender, number); used by the rule baseline too
    "he": ("m", "sg"),
    "him": ("m", "sg"),
    "his": ("m", "sg"),
    "she": ("f", "sg"),
    "her": ("f", "sg"),
    "hers": ("f", "sg"),
    "it": ("n", "sg"),
    "its": ("n", "sg"),
    "they": (None, "pl"),
    "them": (None, "pl"),
    "their": (None, "pl"),
}
