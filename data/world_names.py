"""Name pools and the Namer for the synthetic world (data/world.py): invented roots, given names,
industries, work kinds, event kinds, and the blocklist that keeps invented words clean.

Separate from data/world_text.py (the sentence templates) because names are drawn while the
world is planned (data/world_plan.py), before any prose is written.
"""
import random


def _words(text: str) -> list[str]:
    return text.split()


# --- name pools -------------------------------------------------------------------------------
# Roots are onset + vowel + middle + vowel + ending (15% skip the middle syllable); about
# 40*9*30*9*44 ~ 4M distinct roots, so a million entities draw fresh ones with few retries.
# Letter clusters were picked to look unlike real place and family names; single vowels are
# listed twice so most names stay short and pronounceable.
ONSETS = _words("B Br C Ch D Dr F Fr G Gr H K Kr L M N P Pr Qu R S Sk St T Th Tr V W Z Ys "
                "Ald Or El Ost Var Hel Mor Tel Cad Wyr")
VOWELS = _words("a e i o u a e i o u y a e o ae ei ou")
MIDDLES = _words("r l n m rn st v th sk d g lm nd rv ss z k b rr lt nn sh dr ck t p f ll ns rd")
ENDINGS = _words("holt mar wick ven dor rel sk ton mere rd th quist n r ck x ll nd lm rn st ss "
                 "gard berg dal vik more ley rin ric mont ver sby rit mond dell stad vy m s l "
                 "k t nt")
GIVEN_HEADS = _words("El Ma To Ise Bra Co Da Fe Ga Hal Ili Jo Ka Le Mi No Ora Pe Ro Sa Te Ula "
                     "Va Wen Ysa Zo Ari Bel Cor Dun")
GIVEN_TAILS = _words("sa rin ven lo mar dric tha nis ra bel ko dan vy wen rik sel ta mond ric "
                     "lin dra mos ria teo nor bio lia vern sto")
# One-letter confusables swap a letter for a look-alike (Marrow / Marlow, Kelmar / Kelmor).
SIMILAR = {"a": "eo", "e": "ai", "i": "ey", "o": "au", "u": "oa", "y": "ie", "r": "l", "l": "r",
           "n": "m", "m": "n", "t": "d", "d": "t", "v": "w", "w": "v", "s": "z", "z": "s",
           "k": "c", "c": "k", "b": "p", "p": "b", "g": "k", "h": "n"}

CITY_SUFFIXES = ["", "", "", "", "", "", "by", "holm", "ford", "port", "wick"]
COUNTRY_SUFFIXES = ["", "", "ia", "ia", "a", "land", "mark", "ora", "ene"]
CURRENCY_UNITS = _words("crown mark florin thaler ducat shilling guilder penning")
OCCUPATIONS = ["film director"] + _words(
    "architect painter novelist engineer chemist violinist economist journalist botanist "
    "historian sculptor mathematician composer photographer surgeon diplomat poet astronomer "
    "playwright cartographer geologist lawyer pianist linguist inventor actor singer "
    "philosopher physicist")

# industry -> name suffixes; works are published by organisations of the matching industry.
INDUSTRIES = {
    "publishing": ["Press", "Publishing", "Books"], "film": ["Pictures", "Films", "Studios"],
    "music": ["Records", "Music"], "manufacturing": ["Industries", "Works", "Manufacturing"],
    "shipping": ["Shipping", "Lines"], "software": ["Systems", "Software", "Labs"],
    "banking": ["Bank", "Capital"], "mining": ["Mining", "Minerals"],
    "food": ["Foods", "Provisions"],
    "energy": ["Energy", "Power"], "telecommunications": ["Telecom", "Networks"],
    "pharmaceutical": ["Pharmaceuticals", "Biotech"], "retail": ["Stores", "Trading"],
    "construction": ["Construction", "Builders"], "aerospace": ["Aerospace", "Aviation"],
    "textile": ["Textiles", "Mills"], "insurance": ["Insurance", "Assurance"],
}
PUBLISHER_INDUSTRY = {"novel": "publishing", "film": "film", "album": "music"}
# no "University of X": it needs "the" in running text, which would break name matching
UNIVERSITY_PATTERNS = ["{r} University", "{r} Academy", "{r} Institute of Technology",
                       "{r} College", "{r} Polytechnic", "{r} State University"]
WORK_KINDS = ["novel", "film", "album"]
WORK_VERB = {"novel": ("wrote", "written"), "film": ("directed", "directed"),
             "album": ("recorded", "recorded")}
WORK_PATTERNS = ["The {N} of {r}", "{r}", "Letters from {r}", "The {r} {N}", "Return to {r}",
                 "Beyond {r}", "{N} for {r}", "{A} {N} of {r}", "The {A} {N}", "{r} {N}"]
WORK_NOUNS = _words("Harbor Lantern Orchard Winter Tide Mirror Garden Archive Compass River "
                    "Tower Season Voyage Crossing Ember Meadow Signal Bell Quarry Shore Atlas "
                    "Mill Veil Glass Thread Whistle Bridge Hollow Island Letter")
WORK_ADJS = _words("Silent Distant Quiet Last Broken Golden Northern Paper Crimson Patient "
                   "Second Hidden Painted Wandering Salt Iron")
# event category -> name qualifiers ("Kelmar Jazz Festival" is a festival).
EVENT_KINDS = {
    "festival": ["Music Festival", "Film Festival", "Jazz Festival", "Arts Festival", "Festival"],
    "summit": ["Summit", "Trade Summit", "Climate Summit"],
    "fair": ["Trade Fair", "Book Fair", "Fair"], "conference": ["Conference", "Science Conference"],
    "exhibition": ["Exhibition", "World Exhibition"], "marathon": ["Marathon", "City Marathon"],
    "congress": ["Congress", "Medical Congress"], "regatta": ["Regatta"], "tournament":
    ["Chess Tournament", "Tennis Tournament"],
}
TYPE_NOUN = {"city": "city", "country": "country", "organisation": "company",
             "university": "university"}

# --- names ----------------------------------------------------------------------------------
# Invented words are redrawn when they contain one of these: syllable soup can spell slurs and
# obscenities ("Pe" + "nis"), which have no place in a public dataset.
BLOCKED_SUBSTRINGS = ("penis", "rape", "rapist", "anus", "anal", "fuck", "shit", "cunt", "dick", "cock",
                      "slut", "whore", "nazi", "hitler", "nigg", "fag", "twat", "porn", "sex", "cum",
                      "semen", "vagin", "puss", "tits", "bitch", "bastard", "kill", "murder", "jihad",
                      "kkk", "hate", "piss", "crap", "arse", "butt", "poop", "nude", "naked", "kike",
                      "spic", "chink", "gook", "wank", "jizz", "dildo", "orgasm", "boob", "molest")


def is_clean(word: str) -> bool:
    lowered = word.lower()
    return not any(bad in lowered for bad in BLOCKED_SUBSTRINGS)


class Namer:
    """Invents names; `fresh` and `derive` return (name, root, attributes the name implies)."""

    def __init__(self, rng: random.Random):
        self.x = rng.random
        self.roots: set = set()  # every invented word in use, so fresh names never collide

    def pick(self, seq):
        return seq[int(self.x() * len(seq))]

    def fresh_root(self) -> str:
        pick = self.pick
        while True:
            root = pick(ONSETS) + pick(VOWELS)
            if self.x() < 0.85:
                root += pick(MIDDLES) + pick(VOWELS)
            root += pick(ENDINGS)
            if root not in self.roots and is_clean(root):
                self.roots.add(root)
                return root

    def claim(self, word: str) -> str:
        self.roots.add(word)
        return word

    def mutate(self, root: str) -> str | None:
        """The root with one letter swapped for a look-alike, if unused."""
        for _ in range(8):
            i = 1 + int(self.x() * (len(root) - 1))
            alts = SIMILAR.get(root[i])
            if alts:
                new = root[:i] + self.pick(alts) + root[i + 1:]
                if new not in self.roots and is_clean(new):
                    return self.claim(new)
        return None

    def currency(self) -> str:
        return f"{self.fresh_root()} {self.pick(CURRENCY_UNITS)}"

    def given(self) -> str:
        while True:
            name = self.pick(GIVEN_HEADS) + self.pick(GIVEN_TAILS)
            if is_clean(name):
                return name

    def fresh(self, e) -> tuple[str, str, dict]:
        pick, root = self.pick, self.fresh_root()
        if e.type == "person":
            return f"{self.given()} {root}", root, {}
        if e.type in ("city", "country"):
            suffixes = CITY_SUFFIXES if e.type == "city" else COUNTRY_SUFFIXES
            name = root + pick(suffixes) if len(root) < 8 else root
            if name != root and (name in self.roots or not is_clean(name)):  # "Hutas"+"by" may be someone's root
                name = root
            return self.claim(name), name, {}
        if e.type == "organisation":
            industry = pick(list(INDUSTRIES))
            return f"{root} {pick(INDUSTRIES[industry])}", root, {"industry": industry}
        if e.type == "university":
            return pick(UNIVERSITY_PATTERNS).format(r=root), root, {}
        if e.type == "work":
            name = pick(WORK_PATTERNS).format(r=root, N=pick(WORK_NOUNS), A=pick(WORK_ADJS))
            return name, root, {"kind": pick(WORK_KINDS)}
        category = pick(list(EVENT_KINDS))
        return f"{root} {pick(EVENT_KINDS[category])}", root, {"category": category}

    def derive(self, e, src, kind: str) -> tuple[str, str, dict] | None:
        """A name for e that is confusable with src's, or None when none is free."""
        pick = self.pick
        if kind == "one_letter":
            new = self.mutate(src.root)
            if new is None:
                return None
            at = src.name.rfind(src.root)
            name = src.name[:at] + new + src.name[at + len(src.root):]
            keep = {k: v for k, v in src.attrs.items() if k in ("industry", "kind", "category")}
            return name, new, keep
        if kind == "same_name" and e.type == "organisation":
            return src.name, src.name, {"industry": pick(list(INDUSTRIES))}
        if kind == "same_name":  # a film or novel titled with a person's name
            return src.name, src.root, {"kind": pick(("film", "novel"))}
        if e.type == "person":
            return f"{self.given()} {src.root}", src.root, {}
        if e.type == "organisation":
            industry = pick(list(INDUSTRIES))
            return f"{src.name} {pick(INDUSTRIES[industry])}", src.name, {"industry": industry}
        if e.type == "university":
            return pick(UNIVERSITY_PATTERNS).format(r=src.root), src.root, {}
        category = pick(list(EVENT_KINDS))
        return f"{src.root} {pick(EVENT_KINDS[category])}", src.root, {"category": category}
