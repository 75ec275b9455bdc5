"""Seeded, deterministic generator of synthetic customer-service dialogues for fogline's default
model (fogline-helpdesk).

The user side varies freely (phrasings, greetings, slot formats); the assistant side is a
deterministic function of the conversation: one canonical reply per (intent, slots, context),
so exact match is a meaningful metric.

Held-out split: slot values (order numbers, names, products, street names, dates, amounts) and
user phrasing templates are partitioned (products and streets by the whole value: "blue yoga mat"
and "Cedar Lane" are values; their words also occur in training in other values); the "test" split draws only from the held-out halves, the
"train" split only from the training halves, so no held-out value or phrasing occurs in training.
v3: the held-out phrasings ("test") are new sentences made of words that the training phrasings
of the same request use; v2's held-out phrasings, whose key words never occur in training, stay
out of training as the "lex" split (TEMPLATES). Training slot values are partly invented words
(_pseudo; v3 30%, v4 45% of names), so that copying, not recall, is what the model learns.
v4: generate_mixed(p_system=...) puts a shop's system prompt (system_prompt) before some
dialogues; the reply does not change.

Conversation state carried across turns: the current order number, the current product, the
customer's name and an intent waiting for an order number. Later turns depend on earlier ones:
"Can you cancel it?" in turn 2 uses the order number given in turn 1; a reply that asked for
the order number is resolved by the next user message.

Usage: python3 datagen.py --split test --n 5 --seed 1   (prints dialogues as JSON lines)
"""
import argparse
import json
import random
import re

# ---------------------------------------------------------------- slot values (train | test)

FIRST = ["Maria", "James", "Aisha", "Chen", "Olivia", "Liam", "Sofia", "Noah", "Emma", "Lucas",
         "Priya", "Mateo", "Hannah", "Omar", "Grace", "Daniel", "Yuki", "Ethan", "Chloe", "Ivan",
         "Zara", "Samuel", "Lena", "Arjun", "Mia", "Diego", "Nora", "Felix", "Amara", "Leo",
         "Ruby", "Kenji", "Elena", "Tom", "Fatima", "Oscar", "Julia", "Ahmed", "Sara", "Victor",
         "Alice", "Ben", "Clara", "David", "Eva", "Frank", "Helen", "Isaac", "Jade", "Karl",
         "Laura", "Marco", "Nina", "Owen", "Paula", "Quinn", "Rosa", "Simon", "Tara", "Uma",
         "Vera", "Wes", "Xavier", "Yara", "Zoe", "Adam", "Bianca", "Caleb", "Dana", "Elias",
         "Farah", "Gabe", "Hugo", "Ines", "Jonas", "Kira", "Luca", "Maya", "Nico", "Petra"]
LAST = ["Smith", "Garcia", "Khan", "Lee", "Brown", "Silva", "Novak", "Patel", "Jones", "Rossi",
        "Kim", "Muller", "Lopez", "Ali", "Walker", "Moreau", "Tanaka", "Nowak", "Clark", "Ivanova",
        "Costa", "Berg", "Dubois", "Young", "Wright", "Meyer", "Park", "Fischer", "Reyes", "Hall"]
PRODUCTS = ["wireless headphones", "coffee maker", "desk lamp", "yoga mat", "rain jacket",
            "blender", "backpack", "smart watch", "office chair", "water bottle", "toaster",
            "bluetooth speaker", "hiking boots", "phone case", "air fryer", "winter coat",
            "electric kettle", "gaming mouse", "standing desk", "laptop stand", "wool scarf",
            "running shoes", "tablet", "mechanical keyboard", "vacuum cleaner", "frying pan",
            "bed sheets", "table fan", "camera bag", "sunglasses", "alarm clock", "rice cooker",
            "web camera", "travel mug", "bath towel", "hair dryer", "monitor", "cutting board",
            "denim jacket", "pillow"]
STREETS = ["Oak", "Maple", "Pine", "Cedar", "Elm", "Birch", "Willow", "Lake", "Hill", "River",
           "Park", "Sunset", "Highland", "Church", "Mill", "Spring", "Forest", "Meadow", "Bridge",
           "Harbor", "Orchard", "Valley", "Garden", "Chestnut", "Walnut", "Aspen", "Cherry",
           "Laurel", "Ridge", "Station"]
SUFFIX = ["Street", "Avenue", "Road", "Lane", "Drive", "Way", "Court", "Place"]
CITIES = ["Springfield", "Riverton", "Lakewood", "Fairview", "Greenville", "Madison", "Clayton",
          "Ashford", "Bristol", "Dover", "Milton", "Salem", "Franklin", "Georgetown", "Oxford"]
# v2: more values, and products with an optional modifier ("blue yoga mat"), so that the model
# has to copy a value rather than recall it from a short list.
FIRST += ["Aaron", "Beatriz", "Cyrus", "Delia", "Emil", "Freya", "Gustav", "Hiro", "Ingrid",
          "Jorge", "Kamala", "Lars", "Malik", "Naomi", "Orla", "Pavel", "Rania", "Stefan",
          "Talia", "Ulrich", "Valentina", "Wanda", "Yusuf", "Zeynep", "Anton", "Bruno", "Celia",
          "Dmitri", "Esther", "Fiona", "Gemma", "Hector", "Irene", "Joel", "Kofi", "Lydia",
          "Miriam", "Nathan", "Odile", "Pedro", "Rafael", "Selma", "Theo", "Ursula", "Vince",
          "Willa", "Ximena", "Yosef", "Zainab", "Agnes", "Boris", "Carmen", "Dario", "Edith",
          "Filip", "Greta", "Hassan", "Ida", "Jasper", "Kasia", "Lionel", "Marta", "Nils",
          "Olga", "Rupert", "Sven", "Tobias", "Viola", "Wendy", "Yvonne"]
LAST += ["Andersen", "Baker", "Castro", "Dixon", "Evans", "Ferreira", "Gomez", "Hughes",
         "Ito", "Jensen", "Kowalski", "Larsen", "Martin", "Nguyen", "Okafor", "Perez", "Quinn",
         "Romero", "Schmidt", "Torres", "Usman", "Vargas", "Weber", "Xu", "Yilmaz", "Zhang",
         "Bauer", "Cruz", "Diaz", "Engel"]
PRODUCTS += ["toothbrush", "tent", "sleeping bag", "picnic basket", "shower curtain",
             "flower vase", "ceiling light", "paint set", "puzzle", "board game", "dog bed",
             "bike helmet", "bike lock", "tennis racket", "football", "dumbbells", "jump rope",
             "notebook", "printer", "router", "power bank", "charging cable", "hard drive",
             "memory card", "microphone", "projector", "teapot", "wine glasses", "dinner plates",
             "salad bowl", "knife set", "baking tray", "oven mitts", "lunch box", "umbrella",
             "duvet", "floor lamp", "bookshelf", "mirror", "doormat"]
MODS = ["black", "white", "red", "blue", "green", "grey", "silver", "pink", "yellow", "small",
        "large", "mini", "classic", "compact", "portable", "wooden", "steel", "leather",
        "cotton", "glass", "bamboo", "travel", "kids", "deluxe", "cordless", "waterproof",
        "vintage", "folding", "family size", "extra large"]
STREETS += ["Sycamore", "Poplar", "Magnolia", "Juniper", "Hawthorn", "Linden", "Beacon",
            "Canal", "Market", "Kings", "Queens", "Mountain", "Prospect", "Franklin", "Lincoln",
            "Washington", "Jefferson", "Madison", "Clinton", "Union", "Broad", "Front", "High",
            "Water", "Bay", "Ocean", "Summit", "Fairway", "Greenwood", "Rosewood", "Brookside",
            "Hillcrest", "Lakeview", "Riverside", "Woodland", "Cottage", "Meadowbrook", "Pinecrest",
            "Foxglove", "Heather"]
SUFFIX += ["Boulevard", "Terrace", "Crescent", "Row"]
DOMAINS = ["example.com", "mail.com", "inbox.net", "post.org", "webmail.io", "letters.net",
           "home.org", "fastmail.co"]
MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August",
          "September", "October", "November", "December"]
SHIP = ["standard", "express", "overnight"]
DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]


# v3: invented words as slot values in training (names, surnames, street names, and 40% as many
# product nouns), so that the model learns to copy whatever the customer wrote instead of
# recalling a known value; held-out values stay the real held-out names, streets and products.
P_PSEUDO = 0.45  # v4 (v3: 0.3): e-mail local parts and hand-off names were v3's copy errors
# sixteenth run on (v3-v5: 0.4 x P_PSEUDO = 18%): v5 recalled a known product for 8 of its 32
# seed-1 errors
P_PSEUDO_PRODUCT = 0.3
_ONSET = ["b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "br", "dr", "gr",
          "kl", "st", "tr", "sh", "ch", "j", "h", "w"]
_NUC = ["a", "e", "i", "o", "u", "ai", "ou", "ea", "y"]
_CODA = ["", "", "", "n", "r", "l", "s", "m", "k", "x", "t"]


def _real_words():
    ws = set()
    for lst in (FIRST, LAST, PRODUCTS, MODS, STREETS, SUFFIX, MONTHS, DAYS):
        for v in lst:
            ws.update(v.lower().split())
    return ws


def _pseudo(r):
    """An invented lower-case word (2-3 syllables) that is none of the real slot words."""
    while True:
        w = "".join(r.choice(_ONSET) + r.choice(_NUC) + r.choice(_CODA)
                    for _ in range(r.choice([2, 2, 3])))
        if w not in _REAL and 3 <= len(w) <= 11:
            return w


_REAL = _real_words()


def _h(x):
    """Stable integer hash (Python's hash() is salted per process)."""
    v = 2166136261
    for ch in str(x).encode():
        v = ((v ^ ch) * 16777619) & 0xFFFFFFFF
    return v


def _part(lst, split):
    """Every 5th value is held out."""
    return [v for i, v in enumerate(lst) if (i % 5 == 4) == (split != "train")]


def _held(x):
    return _h(x) % 6 == 0


class Slots:
    def __init__(self, split):
        self.split = split
        self.first = _part(FIRST, split)
        self.last = _part(LAST, split)
        self.cities = _part(CITIES, split)

    def _ok(self, v):
        return _held(v) == (self.split != "train")

    def _invent(self, r, p=P_PSEUDO):
        """Whether this training value is an invented word (never in the held-out splits)."""
        return self.split == "train" and r.random() < p

    def name(self, r):
        """A first name; in training, 30% invented (see _pseudo)."""
        if self._invent(r):
            return _pseudo(r).capitalize()
        return r.choice(self.first)

    def surname(self, r):
        if self._invent(r):
            return _pseudo(r).capitalize()
        return r.choice(self.last)

    def order(self, r):
        while True:
            n = str(r.randint(10000, 99999))
            if self._ok("o" + n):
                return n

    def amount(self, r):
        while True:
            a = "$%d.%02d" % (r.randint(5, 399), r.choice([0, 0, 49, 99, 50, 25, 95, 10, 75]))
            if self._ok("a" + a):
                return a

    def date(self, r):
        while True:
            d = (r.choice(MONTHS), r.randint(1, 28))
            if self._ok("d%s%d" % d):
                return d

    def product(self, r):
        """A product, bare or with a modifier; the split is by the whole value."""
        while True:
            p = r.choice(PRODUCTS)
            if self._invent(r, P_PSEUDO_PRODUCT):
                p = _pseudo(r)
            if r.random() < 0.6:
                m = r.choice(MODS)
                if m == p.split()[0]:
                    continue  # not "travel travel mug"
                p = m + " " + p
            if self._ok("p" + p):
                return p

    def address(self, r):
        while True:
            name = r.choice(STREETS)
            if self._invent(r):
                name = _pseudo(r).capitalize()
            st = "%s %s" % (name, r.choice(SUFFIX))
            if self._ok("s" + st):
                return "%d %s" % (r.randint(2, 999), st)

    def email(self, r, first):
        last = self.surname(r).lower()
        return r.choice(["%s.%s@%s", "%s%s@%s"]) % (first.lower(), last, r.choice(DOMAINS))


# ---------------------------------------------------------------- user phrasings
# Each list: templates; the last TEST_N of each list are held out (test split only).
# {o} order number (as the user writes it), {p} product, {a} amount, {d} date, {e} email,
# {ad} address, {s} shipping method, {day} weekday.

U = {
    "status_o": ["Where is my order {o}?", "Can you check the status of order {o}?",
                 "What's the status of {o}?", "Has order {o} shipped yet?",
                 "I'm waiting for order {o}, any update?", "Any news on my order {o}?",
                 "Could you track order {o} for me?", "When will order {o} arrive?",
                 "I want to know where order {o} is.", "Is my package for order {o} on the way?",
                 "My order {o} still hasn't come. Where is it?", "Track {o} please."],
    "status": ["Where is my order?", "Can you check my order status?", "Has my order shipped?",
               "I'm still waiting for my package.", "When will my order arrive?",
               "Can you track my package?", "Any update on my delivery?",
               "My package hasn't arrived yet.", "I'd like to track my order.",
               "Where's my stuff?"],
    "ship_s": ["How long does {s} shipping take?", "How fast is {s} delivery?",
               "If I pick {s} shipping, when will it get here?", "What's the delivery time for {s}?",
               "How many days is {s} shipping?", "Tell me how long {s} shipping takes.",
               "Is {s} shipping quick?", "With {s} shipping how long do I wait?"],
    "ship": ["How long does shipping take?", "What are your delivery times?",
             "How fast do you ship?", "How many days until my order arrives after I buy?",
             "What shipping options do you have?", "How long is delivery usually?",
             "Tell me about shipping times.", "When would an order get to me?"],
    "return_p": ["I want to return the {p}.", "How do I return the {p}?",
                 "Can I send back the {p}?", "The {p} isn't what I wanted, can I return it?",
                 "I'd like to return a {p} I bought.", "Is it possible to return my {p}?",
                 "I need to send the {p} back.", "What's the return process for the {p}?",
                 "Can I get a return for the {p}?", "Please help me return the {p}."],
    "return": ["What is your return policy?", "How do returns work?", "Can I return an item?",
               "I want to return something.", "How many days do I have to return stuff?",
               "Do you accept returns?", "How can I send an item back?",
               "Tell me about returns."],
    "refund_oa": ["I was charged {a} for order {o} and want a refund.",
                  "Please refund the {a} for order {o}.", "I need my {a} back for order {o}.",
                  "Can I get a refund of {a} on order {o}?",
                  "Order {o} cost me {a}, I want my money back.",
                  "Refund {a} for order {o} please.", "I want a refund of {a} for order {o}.",
                  "Could you return my {a} for order {o}?",
                  "You owe me {a} for order {o}.", "I paid {a} for {o} and want it refunded."],
    "refund_o": ["I want a refund for order {o}.", "Can you refund order {o}?",
                 "Please refund my order {o}.", "I'd like my money back for order {o}.",
                 "How do I get a refund for {o}?", "Refund order {o} please.",
                 "I need a refund on order {o}.", "Can I get my money back on {o}?",
                 "Give me a refund for order {o}.", "Where is my refund for order {o}?"],
    "refund": ["I want a refund.", "Can I get my money back?", "How do I get a refund?",
               "I'd like a refund please.", "I need a refund for my order.",
               "Please refund me.", "Can you process a refund?", "I want my money back."],
    "damaged_op": ["The {p} from order {o} arrived broken.", "My {p} came damaged, order {o}.",
                   "Order {o}: the {p} is cracked.", "I got the {p} in order {o} and it's damaged.",
                   "The {p} in order {o} doesn't work, it arrived broken.",
                   "The {p} was smashed when order {o} arrived.",
                   "Order {o} came and the {p} is damaged.", "My {p} from {o} is broken.",
                   "Received order {o} but the {p} is destroyed.",
                   "The box for order {o} was crushed and the {p} is broken."],
    "damaged_p": ["My {p} arrived damaged.", "The {p} came broken.", "The {p} I got is cracked.",
                  "I received a damaged {p}.", "The {p} arrived in pieces.",
                  "My new {p} is broken out of the box.", "The {p} showed up damaged.",
                  "The {p} is scratched and dented.", "My {p} was broken on arrival.",
                  "The {p} you sent me is damaged."],
    "wrong_po": ["I ordered a {p} but got a {q} in order {o}.",
                 "Order {o} has a {q} instead of the {p}.",
                 "You sent me a {q}, I ordered a {p}. Order {o}.",
                 "Wrong item in order {o}: I got a {q}, not a {p}.",
                 "I received a {q} instead of my {p}, order {o}.",
                 "Order {o} came with a {q} but I ordered the {p}.",
                 "Got a {q} rather than the {p} in order {o}.",
                 "In order {o} there's a {q}, where's my {p}?",
                 "Order {o} is wrong, it's a {q} and I wanted the {p}.",
                 "You mixed up order {o}: {q} instead of {p}."],
    "wrong_p": ["I ordered a {p} but got a {q}.", "You sent a {q} instead of my {p}.",
                "I received a {q}, but I ordered the {p}.", "Wrong item: got a {q}, not a {p}.",
                "My box had a {q} instead of the {p}.", "I got a {q} and I wanted the {p}.",
                "There's a {q} in my package, not the {p}.", "Instead of the {p} I got a {q}.",
                "Where is my {p}? I only got a {q}.", "This is a {q}, I paid for a {p}."],
    "cancel_o": ["Please cancel order {o}.", "I want to cancel order {o}.", "Cancel {o}.",
                 "Can you cancel my order {o}?", "I need to cancel order {o} right away.",
                 "I changed my mind, cancel order {o}.", "Stop order {o} please.",
                 "How do I cancel order {o}?", "Could you cancel {o} for me?",
                 "I don't want order {o} anymore."],
    "cancel": ["I want to cancel my order.", "Can I cancel my order?", "Please cancel my order.",
               "How do I cancel an order?", "I need to cancel an order.",
               "I changed my mind about my order, cancel it.", "Cancel my order please.",
               "I'd like to cancel a purchase."],
    "cancel_it": ["Can you cancel it?", "Please cancel it.", "Actually, cancel it.",
                  "Then cancel it please.", "I want to cancel it.", "Just cancel it.",
                  "OK, cancel that order.", "Can I cancel it instead?"],
    "addr_oa": ["Change the address for order {o} to {ad}.",
                "Please ship order {o} to {ad} instead.", "Can order {o} go to {ad}?",
                "I moved. Send order {o} to {ad}.", "Update the address on {o} to {ad}.",
                "New address for order {o}: {ad}.", "Deliver order {o} to {ad} please.",
                "Order {o} should go to {ad}.", "Can you send {o} to {ad}?",
                "Please update order {o}, the address is {ad}."],
    "addr_a": ["Please change the shipping address to {ad}.", "Can you send it to {ad} instead?",
               "Ship it to {ad} please.", "The new address is {ad}.", "Update my address to {ad}.",
               "I moved to {ad}, please update it.", "Deliver it to {ad} instead.",
               "Send it to {ad}.", "My address is now {ad}.", "Please use {ad} as the address."],
    "addr": ["I need to change my shipping address.", "Can I change the delivery address?",
             "How do I update my address?", "I want to change where my order ships.",
             "Wrong address on my order, can I fix it?", "I moved, can I update my address?",
             "Can you change the address on my order?", "I gave the wrong address."],
    "pw_e": ["I forgot my password, my email is {e}.", "Reset my password please, {e}.",
             "I can't log in. My account is {e}.", "Please send a password reset to {e}.",
             "I'm locked out of my account {e}.", "My login {e} doesn't work.",
             "Help me reset the password for {e}.", "Password reset for {e} please.",
             "Can't sign in with {e}, forgot the password.", "Lost my password, email {e}."],
    "pw": ["I forgot my password.", "I can't log in to my account.", "How do I reset my password?",
           "I'm locked out of my account.", "My password doesn't work.", "I can't sign in.",
           "Help, I can't access my account.", "I need a new password."],
    "hours_d": ["Are you open on {day}?", "What are your hours on {day}?",
                "When do you open on {day}?", "Is the store open {day}?",
                "What time do you close on {day}?", "Store hours for {day}?",
                "Can I come in on {day}?", "How late are you open on {day}?"],
    "hours": ["What are your store hours?", "When are you open?", "What time do you open?",
              "What are your opening hours?", "When does the store close?",
              "Are you open today?", "Tell me your hours.", "What are the hours of your shop?"],
    "warranty_p": ["Does the {p} have a warranty?", "What's the warranty on the {p}?",
                   "How long is the {p} covered?", "Is the {p} under warranty?",
                   "Tell me about the {p} warranty.", "Warranty for the {p}?",
                   "Is there a guarantee on the {p}?", "If the {p} breaks, is it covered?"],
    "stock_p": ["Is the {p} in stock?", "Do you have the {p} available?",
                "Can I buy the {p} right now?", "Is the {p} available?",
                "Do you still sell the {p}?", "Is the {p} sold out?",
                "Have you got the {p} in stock?", "Any {p} left?"],
    "human_n": ["I want to talk to a human.", "Can I speak to a real person?",
                "Connect me to an agent please.", "I need a human agent.",
                "Let me talk to someone real.", "Transfer me to customer service staff.",
                "Get me a person, not a bot.", "Is there a human I can talk to?",
                "I'd like to speak with a representative.", "Put me through to an agent."],
    "date_od": ["Can order {o} be delivered on {d}?", "Please deliver order {o} on {d}.",
                "I won't be home, can you deliver {o} on {d} instead?",
                "Reschedule delivery of order {o} to {d}.", "Move the delivery for {o} to {d}.",
                "I'd like order {o} to arrive on {d}.", "Change the delivery date of order {o} to {d}.",
                "Could order {o} come on {d}?", "Deliver {o} on {d} please.",
                "Is {d} possible for delivering order {o}?"],
    "date_d": ["Can you deliver it on {d} instead?", "Please deliver it on {d}.",
               "Could it come on {d}?", "Move the delivery to {d}.", "I'd like it on {d}.",
               "Reschedule it for {d}.", "Is {d} possible for delivery?", "Make it {d} please."],
    "thanks": ["Thanks!", "Thank you.", "Great, thanks.", "Perfect, thank you!", "OK thanks.",
               "Thanks a lot.", "Awesome, thank you.", "Cool, thanks!", "Got it, thanks.",
               "That helps, thank you."],
    "give_o": ["It's {o}.", "{o}", "The order number is {o}.", "Order {o}.", "Sure, {o}.",
               "It is {o}.", "My order number is {o}.", "Here it is: {o}.", "Yes, {o}.",
               "Number {o}."],
    "give_e": ["It's {e}.", "{e}", "My email is {e}.", "Sure, {e}.", "The email is {e}.",
               "Use {e}.", "It is {e}.", "Email: {e}."],
    "give_a": ["It's {ad}.", "{ad}", "The new address is {ad}.", "Sure, {ad}.",
               "Send it to {ad}.", "It should go to {ad}.", "New address: {ad}.",
               "Please use {ad}."],
    "status_it": ["Where is it now?", "Has it shipped?", "When will it arrive?",
                  "Can you check its status?", "Is it on the way?", "And where is that order?",
                  "Any update on it?", "When does it get here?"],
    "refund_it": ["Can I get a refund for it instead?", "Actually I want a refund.",
                  "Please refund it.", "Just refund me for it.", "I'd rather have a refund.",
                  "Can you refund that order?", "Refund it please.", "Give me my money back."],
}
TEST_N = 2

# v2: more training paraphrases (inserted before each list's held-out tail, so the held-out
# templates stay the same ones).
EXTRA = {
    "status_o": ["What happened to order {o}?", "Is order {o} on its way?",
                 "Please check on order {o}.", "I haven't received order {o} yet.",
                 "Status of order {o}?", "Can you tell me where {o} is?",
                 "Did order {o} ship?", "Tracking for order {o} please."],
    "status": ["Has my package shipped yet?", "Where is my package?", "Is my order on the way?",
               "I haven't got my order yet.", "Can you tell me where my order is?",
               "What's happening with my order?"],
    "ship_s": ["How quick is {s} shipping?", "When does {s} shipping arrive?",
               "{s} shipping, how many days?", "What does {s} delivery take?"],
    "ship": ["How long will delivery take?", "How quickly do orders arrive?",
             "What are the shipping times?", "How long do deliveries take?",
             "How long does delivery usually take?", "What are your shipping options?"],
    "return_p": ["I don't like the {p}, can I return it?", "Return the {p} please.",
                 "How can I return my {p}?", "I'd like to send the {p} back.",
                 "The {p} doesn't fit, I want to return it."],
    "return": ["How do I return an item?", "What's your return policy?",
               "Can I send something back?", "I'd like to return an item."],
    "refund_oa": ["I want {a} back for order {o}.", "Order {o} was {a}, please refund it.",
                  "Refund my {a} on order {o}.", "Please give back the {a} I paid for order {o}."],
    "refund_o": ["Refund my order {o}.", "I'd like a refund for {o}.",
                 # sixteenth/seventeenth runs: refunds in the "... for order {o} please" frame
                 # and one that starts with "Money back" (the held-out test phrasing below had
                 # only status requests in its frame: v5 read 6 of 17 as one)
                 "Refund for order {o} please.", "A refund for order {o} please.",
                 "Money back on order {o}, please.",
                 "Money back for order {o} please.", "Could you refund order {o}?",
                 "I want my money back for order {o}."],
    "refund": ["Refund please.", "I'd like my money back.", "Can I have a refund?",
               "How can I get my money back?", "I want to be refunded."],
    "damaged_op": ["Order {o} arrived and the {p} is broken.", "The {p} in {o} came cracked.",
                   "My {p} from order {o} is damaged.", "Order {o}, the {p} arrived smashed.",
                   "The {p} from order {o} came in pieces."],
    "damaged_p": ["The {p} is damaged.", "My {p} came cracked.", "I got a broken {p}.",
                  "The {p} was smashed in the box.", "The {p} arrived broken."],
    "wrong_po": ["Order {o} contains a {q}, but I ordered a {p}.",
                 "I got the wrong item in order {o}, a {q} instead of the {p}.",
                 "Order {o}: I ordered the {p} and you sent a {q}.",
                 "The {p} I ordered in {o} is actually a {q}."],
    "wrong_p": ["I got the wrong item, a {q} instead of the {p}.",
                "You sent me the wrong thing: a {q}, not the {p}.",
                "I ordered the {p} and received a {q}.", "Wrong item, I got a {q}, I wanted a {p}."],
    "cancel_o": ["Cancel order {o} please.", "Please stop order {o}.",
                 "Can order {o} be cancelled?", "I'd like to cancel {o}.",
                 "I no longer need order {o}, cancel it.", "Drop order {o} please."],
    "cancel": ["Can you cancel my order?", "I'd like to cancel my order.",
               "I don't need my order anymore, please cancel.", "Please stop my order."],
    "cancel_it": ["Cancel it then.", "Cancel the order please.", "Could you cancel it?",
                  "Please cancel that."],
    "addr_oa": ["Send order {o} to {ad} please.", "Order {o} needs to go to {ad}.",
                "Change order {o}'s address to {ad}.", "Ship {o} to {ad}.",
                "The address for order {o} is now {ad}."],
    "addr_a": ["Change the address to {ad}.", "Ship to {ad} instead.",
               "The address should be {ad}.", "Please send it to {ad}.",
               "Use {ad} for the delivery."],
    "addr": ["I want to update my shipping address.", "Can I update the address on my order?",
             "I need a different delivery address.", "Please change my address."],
    "pw_e": ["Password reset please, my email is {e}.", "I can't get into {e}.",
             "Forgot the password for {e}.", "Reset the password on {e}.",
             "My account {e} is locked, I forgot my password."],
    "pw": ["I can't remember my password.", "Reset my password please.",
           "I'm unable to log in.", "I lost my password.",
           "I forgot my password, can you reset it?"],
    "hours_d": ["Do you open on {day}?", "What are your opening hours on {day}?",
                "Are you closed on {day}?", "When are you open on {day}?"],
    "hours": ["When do you close?", "What are your hours?", "When can I visit the store?",
              "What time does the shop open?"],
    "warranty_p": ["Is there a warranty on the {p}?", "How long is the warranty for the {p}?",
                   "Does the {p} come with a warranty?", "What warranty does the {p} have?"],
    "stock_p": ["Do you have the {p}?", "Is the {p} in stock right now?",
                "Can I still order the {p}?", "Are there any {p} in stock?",
                "How many {p} do you have?", "Is the {p} still available?"],
    "human_n": ["I want a real person.", "Can I talk to an agent?",
                "Please connect me to a human.", "Let me speak to a person.",
                "I'd like to talk to a human agent."],
    "date_od": ["Deliver order {o} on {d}.", "Can {o} arrive on {d}?",
                "Please move order {o} to {d}.", "Schedule order {o} for {d}."],
    "date_d": ["Deliver it on {d}.", "Can it arrive on {d}?", "Please move it to {d}.",
               "Change the delivery to {d}."],
    "thanks": ["Thanks so much.", "Thank you very much!", "Many thanks.", "Thanks, that's all.",
               "Great, thank you so much.", "OK, thanks a lot!"],
    "give_o": ["{o} is the number.", "Order number {o}.", "The number is {o}.", "It's order {o}."],
    "give_e": ["{e} is my email.", "My email address is {e}.", "Email is {e}."],
    "give_a": ["{ad} please.", "The address is {ad}.", "Ship it to {ad}.",
               "Please send it to {ad}.", "The address should be {ad}."],
    "status_it": ["Where is it?", "Is it on its way?", "Did it ship?", "What's its status?"],
    "refund_it": ["Refund it instead.", "I want a refund for it.", "Can you refund it?",
                  "Actually, refund me."],
}
for _k, _v in EXTRA.items():
    U[_k] = U[_k][:-TEST_N] + _v + U[_k][-TEST_N:]

GREET = ["", "", "", "Hi, ", "Hello, ", "Hey, ", "Hi there. ", "Good morning. ", "Hello! ",
         "Hi! ", "Excuse me, ", "Hey there, "]
GREET_TEST = ["Good evening. ", "Hiya, ", "Greetings. "]
GREET += ["Good afternoon. ", "Hello there. ", "Hey! ", "Morning. ", "Dear support, ",
          "Hi team, ", "Hello support. ", "Hi again. "]
NAME_INTRO = ["This is {n}. ", "I'm {n}. ", "My name is {n}. ", "{n} here. ", "I am {n}. ",
              "Name's {n}. ", "This is {n} again. ", "{n} writing. ", "Hello, I'm {n}. ",
              "My name's {n}. "]
# Sentences that are not questions (train | test): they must not get an answer of their own.
FILLER = ["Quick question. ", "Sorry to bother you. ", "I need some help. ",
          "Hope you're well. ", "Long-time customer here. ", "I have a question. ",
          "I hope you can help. ", "Sorry for the trouble. ", "I'm a bit confused. ",
          "I just have one thing. "]
FILLER_TEST = ["Hope your day is going well. ", "One small thing. "]
TAIL = [" Thanks.", " Thank you!", " Please help.", " Thanks in advance.", " It's urgent.",
        " Thanks a lot."]
TAIL_TEST = [" Cheers.", " Much appreciated."]
FOLLOW = ["OK. ", "Alright. ", "Also, ", "One more thing: ", "Great. ", "Another question: "]
FOLLOW_TEST = ["Right. ", "Fine. "]
NAME_INTRO_TEST = ["Hi, {n} speaking. ", "It's {n}. "]
ORDER_FMT = ["{n}", "{n}", "#{n}", "no. {n}"]


# v3: two held-out phrasing sets per list.
#  - "lex" (v2's held-out set, the last TEST_N of each list): phrasings whose key words never
#    occur in training in that sense ("Any {p} left?", "I'd like to speak with a
#    representative."); a model trained from scratch on this data cannot know those words.
#  - "test" (the held-out split from v3 on): TEST_N other phrasings of each list, chosen so that
#    each of their words occurs in the list's training phrasings: new sentences made of words the
#    model has seen used for that request. Neither set occurs in training.
_WORD = re.compile(r"[a-z]+")


def _words(t):
    return set(_WORD.findall(re.sub(r"\{\w+\}", " ", t).lower()))


def _split_templates(lst):
    lex = lst[-TEST_N:]
    cand = lst[:-TEST_N]
    comp = []
    for t in reversed(cand):
        if len(comp) == TEST_N:
            break
        rest = [x for x in cand if x != t and x not in comp]
        known = set().union(*(_words(x) for x in rest))
        if len(_words(t)) >= 2 and _words(t) <= known and all(_words(c) <= known for c in comp):
            comp.append(t)
    assert len(comp) == TEST_N, lst
    train = [x for x in cand if x not in comp]
    return train, comp[::-1], lex


TEMPLATES = {k: dict(zip(("train", "test", "lex"), _split_templates(v))) for k, v in U.items()}


def _tmpl(key, split, r):
    return r.choice(TEMPLATES[key][split])


# ---------------------------------------------------------------- canonical replies

SHIP_REPLY = {
    "standard": "Standard shipping takes 3 to 5 business days.",
    "express": "Express shipping takes 1 to 2 business days.",
    "overnight": "Overnight shipping arrives the next business day if you order before 2 pm.",
}
HOURS = {d: "9 am to 9 pm" for d in DAYS[:5]}
HOURS["Saturday"] = "10 am to 8 pm"
HOURS["Sunday"] = "11 am to 5 pm"

ASK_ORDER = {
    "status": "I can check that for you. What is your order number?",
    "refund": "I can help with a refund. What is your order number?",
    "damaged": "I am sorry about that. What is your order number?",
    "wrong": "Sorry for the mix-up. What is your order number?",
    "cancel": "I can cancel it for you. What is your order number?",
    "addr": "I can update the address. What is your order number?",
}


def reply_for(intent, s):
    """The canonical assistant reply. s: dict of resolved slots for this turn."""
    o, p = s.get("o"), s.get("p")
    if intent == "status":
        return "Order %s has shipped and is on its way. The tracking link is in your " \
               "confirmation email." % o
    if intent == "ship":
        if s.get("s"):
            return SHIP_REPLY[s["s"]]
        return "Standard shipping takes 3 to 5 business days and express shipping takes 1 to 2."
    if intent == "return":
        if p:
            return "You can return the %s within 30 days of delivery. Start the return on " \
                   "the Orders page and we will email you a free return label." % p
        return "You can return most items within 30 days of delivery. Start the return on " \
               "the Orders page."
    if intent == "refund":
        if s.get("a"):
            return "I have refunded %s for order %s. It will reach your original payment " \
                   "method within 5 to 7 business days." % (s["a"], o)
        return "I have started a refund for order %s. It will reach your original payment " \
               "method within 5 to 7 business days." % o
    if intent == "damaged":
        return "I am sorry the %s arrived damaged. A free replacement for order %s will ship " \
               "within 2 business days." % (p, o)
    if intent == "wrong":
        return "Sorry about that. We will ship the %s for order %s today and email you a free " \
               "return label for the %s." % (p, o, s["q"])
    if intent == "cancel":
        return "Order %s has been cancelled. You will get a confirmation email shortly." % o
    if intent == "addr":
        return "Done. Order %s will now ship to %s." % (o, s["ad"])
    if intent == "date":
        return "Delivery of order %s is now scheduled for %s %d." % (o, s["d"][0], s["d"][1])
    if intent == "pw":
        return "I have sent a password reset link to %s. The link expires in 24 hours." % s["e"]
    if intent == "hours":
        if s.get("day"):
            return "On %s we are open from %s." % (s["day"], HOURS[s["day"]])
        return "We are open 9 am to 9 pm on weekdays, 10 am to 8 pm on Saturday and 11 am to " \
               "5 pm on Sunday."
    if intent == "warranty":
        return "The %s comes with a one-year warranty that covers manufacturing defects." % p
    if intent == "stock":
        return "Yes, the %s is in stock and ships within one business day." % p
    if intent == "human":
        if s.get("n"):
            return "Of course, %s. I am connecting you to a human agent now. The wait is " \
                   "about 5 minutes." % s["n"]
        return "Of course. I am connecting you to a human agent now. The wait is about 5 minutes."
    if intent == "thanks":
        if s.get("n"):
            return "You're welcome, %s! Is there anything else I can help you with?" % s["n"]
        return "You're welcome! Is there anything else I can help you with?"
    if intent == "ask_email":
        return "I can help you get back in. What is the email address on your account?"
    if intent == "ask_addr":
        return "Sure. What is the new address for order %s?" % o
    raise ValueError(intent)


ORDER_INTENTS = ("status", "refund", "damaged", "wrong", "cancel", "addr")


class Dialogue:
    """Generates one conversation turn by turn, keeping the state that replies depend on."""

    def __init__(self, slots, r, plain=False):
        self.plain = plain     # no follow-up words, fillers or tails (outline points)
        self.sl = slots
        self.r = r
        self.split = slots.split
        self.order = None      # last order number mentioned
        self.product = None    # last product mentioned
        self.name = None
        self.pending = None    # (intent, partial slots) waiting for an order number / field
        self.msgs = []

    def _fmt_order(self, n):
        return self.r.choice(ORDER_FMT).format(n=n)

    def _date(self, d):
        m, day = d
        sfx = {1: "st", 2: "nd", 3: "rd", 21: "st", 22: "nd", 23: "rd"}.get(day, "th")
        return self._date_fmt(m, day, sfx)

    def _date_fmt(self, m, day, sfx):
        k = self.r.randrange(4)
        if k < 2:
            return "%s %d" % (m, day)
        if k == 2:
            return "%s %d%s" % (m, day, sfx)
        return "the %d%s of %s" % (day, sfx, m)

    def _product_pair(self):
        p = self.sl.product(self.r)
        while True:
            q = self.sl.product(self.r)
            if q.split()[-1] != p.split()[-1]:
                return p, q

    def _user(self, text, first):
        r = self.r
        test = self.split != "train"
        pre = ""
        if first:
            greets = GREET + (GREET_TEST if test else [])
            pre = r.choice(greets)
            if self.name is None and r.random() < 0.25:
                self.name = self.sl.name(r)
                intros = NAME_INTRO_TEST if test else NAME_INTRO
                pre += r.choice(intros).format(n=self.name)
        elif not self.plain and r.random() < 0.15:
            pre = r.choice(FOLLOW + (FOLLOW_TEST if test else []))
        if not self.plain and r.random() < 0.12:
            if pre.endswith(", "):
                pre = pre[:-2] + ". "
            pre += r.choice(FILLER + (FILLER_TEST if test else []))
        if pre.endswith(", ") and not text.startswith(("I ", "I'")):
            text = text[0].lower() + text[1:]
        t = pre + text
        if not self.plain and r.random() < 0.08 and t.endswith((".", "?", "!")):
            t += r.choice(TAIL + (TAIL_TEST if test else []))
        if r.random() < 0.15:
            t = t[0].lower() + t[1:]
        if r.random() < 0.1 and t.endswith((".", "?", "!")):
            t = t[:-1]
        return t

    def turn(self, first):
        """Returns (user_text, reply)."""
        r = self.r
        sp = self.split
        T = lambda k: _tmpl(k, sp, r)
        if self.pending is not None:
            intent, s = self.pending
            self.pending = None
            if s.get("_need") == "e":
                e = self.sl.email(r, self.name or self.sl.name(r))
                return self._user(T("give_e").format(e=e), first), reply_for("pw", {"e": e})
            if s.get("_need") == "ad":
                ad = self.sl.address(r)
                s = dict(s, ad=ad)
                return self._user(T("give_a").format(ad=ad), first), reply_for("addr", s)
            o = self.sl.order(r)
            self.order = o
            s = dict(s, o=o)
            if intent == "addr" and "ad" not in s:
                self.pending = ("addr", dict(s, _need="ad"))
                return self._user(T("give_o").format(o=o), first), reply_for("ask_addr", s)
            return self._user(T("give_o").format(o=o), first), reply_for(intent, s)

        # follow-ups that use the context's order number
        if self.order is not None and r.random() < 0.6:
            k = r.choice(["cancel_it", "status_it", "refund_it", "addr_a", "date_d", "thanks"])
            o = self.order
            if k == "cancel_it":
                return self._user(T(k), first), reply_for("cancel", {"o": o})
            if k == "status_it":
                return self._user(T(k), first), reply_for("status", {"o": o})
            if k == "refund_it":
                return self._user(T(k), first), reply_for("refund", {"o": o})
            if k == "date_d":
                d = self.sl.date(r)
                return (self._user(T(k).format(d=self._date(d)), first),
                        reply_for("date", {"o": o, "d": d}))
            if k == "addr_a":
                ad = self.sl.address(r)
                return self._user(T(k).format(ad=ad), first), reply_for("addr", {"o": o, "ad": ad})
            return self._user(T(k), first), reply_for("thanks", {"n": self.name})

        intent = r.choice(["status", "ship", "return", "refund", "damaged", "wrong", "cancel",
                           "addr", "date", "pw", "hours", "warranty", "stock", "human", "status",
                           "refund", "cancel", "thanks" if not first else "human"])
        with_o = r.random() < 0.6
        o = self.sl.order(r)
        of = self._fmt_order(o)
        if intent == "status":
            if with_o:
                self.order = o
                return self._user(T("status_o").format(o=of), first), reply_for("status", {"o": o})
            self.pending = ("status", {})
            return self._user(T("status"), first), ASK_ORDER["status"]
        if intent == "ship":
            if r.random() < 0.6:
                s = r.choice(SHIP)
                return self._user(T("ship_s").format(s=s), first), reply_for("ship", {"s": s})
            return self._user(T("ship"), first), reply_for("ship", {})
        if intent == "return":
            if r.random() < 0.7:
                p = self.sl.product(r)
                self.product = p
                return self._user(T("return_p").format(p=p), first), reply_for("return", {"p": p})
            return self._user(T("return"), first), reply_for("return", {})
        if intent == "refund":
            if with_o:
                self.order = o
                if r.random() < 0.5:
                    a = self.sl.amount(r)
                    return (self._user(T("refund_oa").format(o=of, a=a), first),
                            reply_for("refund", {"o": o, "a": a}))
                return self._user(T("refund_o").format(o=of), first), reply_for("refund", {"o": o})
            self.pending = ("refund", {})
            return self._user(T("refund"), first), ASK_ORDER["refund"]
        if intent == "damaged":
            p = self.sl.product(r)
            self.product = p
            if with_o:
                self.order = o
                return (self._user(T("damaged_op").format(o=of, p=p), first),
                        reply_for("damaged", {"o": o, "p": p}))
            self.pending = ("damaged", {"p": p})
            return self._user(T("damaged_p").format(p=p), first), ASK_ORDER["damaged"]
        if intent == "wrong":
            p, q = self._product_pair()
            self.product = p
            if with_o:
                self.order = o
                return (self._user(T("wrong_po").format(o=of, p=p, q=q), first),
                        reply_for("wrong", {"o": o, "p": p, "q": q}))
            self.pending = ("wrong", {"p": p, "q": q})
            return self._user(T("wrong_p").format(p=p, q=q), first), ASK_ORDER["wrong"]
        if intent == "cancel":
            if with_o:
                self.order = o
                return self._user(T("cancel_o").format(o=of), first), reply_for("cancel", {"o": o})
            self.pending = ("cancel", {})
            return self._user(T("cancel"), first), ASK_ORDER["cancel"]
        if intent == "addr":
            ad = self.sl.address(r)
            if with_o:
                self.order = o
                return (self._user(T("addr_oa").format(o=of, ad=ad), first),
                        reply_for("addr", {"o": o, "ad": ad}))
            self.pending = ("addr", {})
            return self._user(T("addr"), first), ASK_ORDER["addr"]
        if intent == "date":
            d = self.sl.date(r)
            self.order = o
            return (self._user(T("date_od").format(o=of, d=self._date(d)), first),
                    reply_for("date", {"o": o, "d": d}))
        if intent == "pw":
            if r.random() < 0.6:
                e = self.sl.email(r, self.name or self.sl.name(r))
                return self._user(T("pw_e").format(e=e), first), reply_for("pw", {"e": e})
            self.pending = ("pw", {"_need": "e"})
            return self._user(T("pw"), first), reply_for("ask_email", {})
        if intent == "hours":
            if r.random() < 0.6:
                day = r.choice(DAYS)
                return self._user(T("hours_d").format(day=day), first), reply_for("hours", {"day": day})
            return self._user(T("hours"), first), reply_for("hours", {})
        if intent in ("warranty", "stock"):
            p = self.sl.product(r)
            self.product = p
            return (self._user(T(intent + "_p").format(p=p), first),
                    reply_for(intent, {"p": p}))
        if intent == "human":
            return self._user(T("human_n"), first), reply_for("human", {"n": self.name})
        return self._user(T("thanks"), first), reply_for("thanks", {"n": self.name})


def dialogue(split, r, n_turns=None):
    """One conversation: list of {"role", "content"} with 1-3 user/assistant exchanges."""
    sl = _SLOTS[split]
    d = Dialogue(sl, r)
    n = n_turns or r.choice([1, 1, 2, 2, 3])
    msgs = []
    for t in range(n):
        u, a = d.turn(first=(t == 0))
        msgs.append({"role": "user", "content": u})
        msgs.append({"role": "assistant", "content": a})
    return msgs


_SLOTS = {"train": Slots("train"), "test": Slots("test"), "lex": Slots("lex")}

# ---- multi-intent messages and outlines (parallel segments: skeleton decoding) ----

# The server's outline instruction (server/outline.h SRV_OUTLINE_PROMPT): keep them equal.
OUTLINE_SYSTEM = "List the independent questions in the customer's message, one per line."


def _parts(split, r, k):
    """k independent single-intent (user, reply) pairs, each from a fresh conversation (no
    shared order, product or name), no greeting, distinct reply templates."""
    out, seen = [], set()
    for _ in range(50 * k):
        if len(out) == k:
            break
        d = Dialogue(_SLOTS[split], r, plain=True)
        u, a = d.turn(first=False)
        key = " ".join(a.split()[:2])
        if key in seen:
            continue
        seen.add(key)
        if not u.endswith((".", "?", "!")):
            u += "?" if u.split()[0].lower() in ("where", "what", "when", "can", "how", "is", "do", "does") else "."
        out.append((u, a))
    return out


def _lead(split, r):
    """What may precede a multi-question message: a greeting and a sentence that is not a
    question (neither is answered nor listed in an outline)."""
    test = split != "train"
    t = r.choice(GREET + (GREET_TEST if test else []))
    if r.random() < 0.3:
        t += r.choice(FILLER + (FILLER_TEST if test else []))
    if t.endswith(", "):
        t = t[:-2] + ". "
    return t


def multi_dialogue(split, r, k=None, with_parts=False):
    """A customer message with 2-3 independent questions; the reply answers each in order (the
    single-intent replies joined by a space): what plain decoding must produce, and what a
    skeleton reply joins from its branches. with_parts: also returns the single replies."""
    k = k or r.choice([2, 2, 3])
    parts = _parts(split, r, k)
    user = _lead(split, r) + " ".join(u for u, _ in parts)
    msgs = [{"role": "user", "content": user},
            {"role": "assistant", "content": " ".join(a for _, a in parts)}]
    return (msgs, [a for _, a in parts]) if with_parts else msgs


def outline_dialogue(split, r):
    """The outline stage: the instruction, a customer message of 1-3 questions, and the numbered
    list of its questions verbatim (one question: a one-point outline, i.e. decode plainly)."""
    k = r.choice([1, 2, 2, 3])
    parts = _parts(split, r, k)
    user = _lead(split, r) + " ".join(u for u, _ in parts)
    outline = "\n".join("%d. %s" % (i + 1, u) for i, (u, _) in enumerate(parts))
    return [{"role": "system", "content": OUTLINE_SYSTEM}, {"role": "user", "content": user},
            {"role": "assistant", "content": outline}]


# ---- system prompts (v4) ----
# Operators put a system prompt before the conversation. The model cannot follow free-form
# instructions; what it must learn is that a shop's system prompt does not change the help-desk
# reply (v3, trained without them, wrote noise after one). The outline instruction is the one
# system prompt that changes the task. Every 5th opening and rule is held out (split != train).
SYS_OPEN = ["You are the help desk of {shop}.", "You are a customer service assistant for {shop}.",
            "You are a helpful assistant.", "You work for {shop}, an online store.",
            "You are the support agent of {shop}.", "You are a help desk.",
            "Act as the customer support team of {shop}.", "You answer customer questions.",
            "You are a friendly support bot for {shop}.", "You are the online shop's assistant.",
            "You are a support assistant.", "This is the support chat of {shop}."]
SYS_RULES = ["Be polite.", "Keep answers short.", "Copy order numbers exactly.",
             "Answer in English.", "Never share personal data of other customers.",
             "Do not make up order details.", "Use the customer's name when you know it.",
             "Refunds take 5 to 7 business days.", "Be friendly and professional.",
             "Answer politely and copy order numbers exactly.", "Do not use emojis.",
             "Ask for the order number when it is missing.", "Keep a calm tone.",
             "Offer a human agent when the customer asks for one.",
             "Do not discuss topics unrelated to the shop.", "Reply in one or two sentences.",
             "Never ask for a password.", "Returns are free within 30 days.",
             "Confirm every change to an order.", "Thank the customer when appropriate.",
             "The store is open from 9 am to 6 pm.", "Standard shipping takes 3 to 5 days.",
             "Do not promise delivery dates you cannot confirm.", "Be concise.",
             "Today is a normal business day.", "Stay on topic.",
             "Write plain text without markdown.", "Apologise when something went wrong.",
             "Check the conversation for an order number before asking for it.",
             "Treat every customer with respect."]
SYS_SHOPS = ["Northwind", "Acme Shop", "Bluebird Store", "Cornerstone", "Hilltop Market",
             "Lumen Goods", "Maple & Co", "Riverbend", "Sunny Home", "Urban Nest"]


def system_prompt(split, r):
    """A shop's system prompt: an opening and 0-6 rules (sometimes 10-24: long shared prefixes),
    as sentences, numbered rules ("Rule 3: ..."), bullets or numbered lines."""
    opens, rules = _part(SYS_OPEN, split), _part(SYS_RULES, split)
    shop = r.choice(SYS_SHOPS) if r.random() < 0.5 or split != "train" else \
        _pseudo(r).capitalize() + r.choice(["", " Shop", " Store", " Outlet"])
    head = r.choice(opens).format(shop=shop)
    k = r.randint(10, 24) if r.random() < 0.1 else r.choice([0, 1, 2, 2, 3, 4, 5, 6])
    rs = [r.choice(rules) for _ in range(k)]
    style = r.choice(["sent", "sent", "rule", "dash", "num"])
    if not rs:
        return head
    if style == "sent":
        return head + " " + " ".join(rs)
    if style == "rule":
        return head + " " + " ".join("Rule %d: %s" % (i + 1, x[0].lower() + x[1:])
                                     for i, x in enumerate(rs))
    if style == "dash":
        return head + "\n" + "\n".join("- " + x for x in rs)
    return head + "\n" + "\n".join("%d. %s" % (i + 1, x) for i, x in enumerate(rs))


def with_system(split, r, msgs):
    return [{"role": "system", "content": system_prompt(split, r)}] + msgs


def generate_mixed(split, n, seed, p_multi=0.15, p_outline=0.15, p_system=0.0):
    """generate() plus multi-intent dialogues and outline examples (train.py --multi)."""
    r = random.Random("%s-mixed-%d" % (split, seed))
    out = []
    for _ in range(n):
        x = r.random()
        if x < p_multi:
            out.append(multi_dialogue(split, r))
        elif x < p_multi + p_outline:
            out.append(outline_dialogue(split, r))
        else:
            out.append(dialogue(split, r))
        if p_system and (x < p_multi or x >= p_multi + p_outline) and r.random() < p_system:
            out[-1] = with_system(split, r, out[-1])
    return out


def generate(split, n, seed):
    """n dialogues, deterministic in (split, n, seed). The test split uses its own seed stream."""
    r = random.Random("%s-%d" % (split, seed))
    return [dialogue(split, r) for _ in range(n)]


def render(msgs, add_generation_prompt=False):
    """ChatML, exactly as the chat template in tokenizer_config.json renders it."""
    s = "".join("<|im_start|>" + m["role"] + "\n" + m["content"] + "<|im_end|>\n" for m in msgs)
    if add_generation_prompt:
        s += "<|im_start|>assistant\n"
    return s


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--split", default="train", choices=["train", "test", "lex"])
    ap.add_argument("--n", type=int, default=5)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--kind", default="plain", choices=["plain", "multi", "outline", "mixed"])
    ap.add_argument("--bench", action="store_true", help="multi: one JSON array of {messages, "
                    "reply, parts} (fogline bench parallel --multi)")
    a = ap.parse_args()
    r = random.Random("%s-%s-%d" % (a.split, a.kind, a.seed))
    if a.bench:
        items = []
        for _ in range(a.n):
            msgs, parts = multi_dialogue(a.split, r, with_parts=True)
            items.append({"messages": msgs[:-1], "reply": msgs[-1]["content"], "parts": parts})
        print(json.dumps(items, indent=1))
        return
    if a.kind == "multi":
        ds = [multi_dialogue(a.split, r) for _ in range(a.n)]
    elif a.kind == "outline":
        ds = [outline_dialogue(a.split, r) for _ in range(a.n)]
    elif a.kind == "mixed":
        ds = generate_mixed(a.split, a.n, a.seed)
    else:
        ds = generate(a.split, a.n, a.seed)
    for d in ds:
        print(json.dumps(d))


if __name__ == "__main__":
    main()
